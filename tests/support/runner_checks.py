"""Helpers of the runner tests: comparing two runs' events, reading the caches' valid slots."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

FLOAT_FIELDS = ("p_target", "p_draft", "margins")


def assert_same_events(got, want, tol: float = 1e-4) -> None:
    """The events of two runs agree: every field exactly (ids, counts, kinds, texts, K, finish),
    timing aside, and p, q and margins to `tol` (two runners compute them in differently shaped
    passes, so they may differ in the last bits in fp32)."""
    assert len(got) == len(want), f"{len(got)} events against {len(want)}"
    for g, w in zip(got, want):
        strip = dict(draft_s=0.0, verify_s=0.0, elapsed_s=0.0, **{f: None for f in FLOAT_FIELDS})
        assert replace(g, **strip) == replace(w, **strip), f"step {w.step}"
        for field in FLOAT_FIELDS:
            assert getattr(g, field) == pytest.approx(getattr(w, field), abs=tol), f"step {w.step}: {field}"


def valid_slots(model, length: int) -> list[torch.Tensor]:
    """Keys and values of every layer at the first `length` positions: (1, heads, length, dim) each,
    from an eager model's cache (lean_pass's KeyValues or transformers' DynamicCache) or a static
    model's preallocated cache."""
    if hasattr(model, "kv"):
        layers = zip(model.kv.keys, model.kv.values)
    elif getattr(model, "lean", False):
        layers = zip(model.cache.keys, model.cache.values)
    else:
        layers = ((layer.keys, layer.values) for layer in model.cache.layers)
    return [t[:, :, :length] for pair in layers for t in pair]
