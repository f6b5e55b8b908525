"""The eager runner's model: a causal LM with its own growing KV cache, extended by each pass and
rolled back by cropping. Where lean_pass supports the model, its passes run lean_pass.decoder_pass
over a KeyValues cache (the same bits, less time); otherwise transformers' decoder over its
DynamicCache."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from transformers import DynamicCache

import specdec.core.runners.joined_products as joined_products
import specdec.core.runners.lean_pass as lean_pass
from specdec.core.config import MAX_K


class CachedModel:
    """The model, its cache, and how its passes run (see __init__): ready for a run."""

    def __init__(self, model, vocab_size: int, linear: Callable[[], contextlib.AbstractContextManager] | None = None,
                 lean: bool | None = None, positions: int = lean_pass.GROWTH):
        self.model = model
        self.vocab_size = vocab_size  # models of one family may pad their embeddings differently
        self.device = model.device
        # lean: run lean_pass (None: wherever it supports the model; False: transformers' path, as the
        # tests compare); positions: how many the lean cache has room for before it grows.
        self.lean = lean_pass.supports(model) if lean is None else lean
        if self.lean:
            self.cache = lean_pass.KeyValues(model.config.num_hidden_layers, positions)
            # the products joined now, before any pass: what wraps a model's products (passcost.no_products, hooks) finds them
            joined_products.plan(model.get_decoder())
        else:
            self.cache = DynamicCache(config=model.config)
        # Entered around every pass: a torch function mode that reroutes F.linear (the builder's
        # choice, e.g. specdec.kernels.cpu_linear.linear_for), or None to run the model as it is.
        self.linear = linear
        self.features: torch.Tensor | None = None  # (n, H) the last pass's final hidden states

    @property
    def length(self) -> int:
        """Positions held in the cache."""
        return self.cache.length if self.lean else self.cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """ids: (n,) tokens after the cached positions -> logits (n, V), or (1, V) if last_only.
        Asking only for the last position's logits skips most of the vocabulary projection. The
        pass's hidden states (after the final norm, every row) stay in `features`."""
        with self.linear() if self.linear else contextlib.nullcontext():
            if self.lean:
                hidden = lean_pass.decoder_pass(self.model.get_decoder(), ids[None], self.cache)  # (1, n, H)
            else:
                hidden = self.model.get_decoder()(input_ids=ids[None], cache=self.cache, use_cache=True).last_hidden_state
            logits = self.model.get_output_embeddings()(hidden[:, -1:] if last_only else hidden)  # (1, n or 1, V)
        self.features = hidden[0]
        return logits[0, :, : self.vocab_size]

    def prefill(self, ids: torch.Tensor) -> None:
        if ids.numel():
            self.forward(ids, last_only=True)

    def crop(self, length: int) -> None:
        """Keep the first `length` positions. (transformers >= 5.24 takes only a negative count:
        crop(-n) drops the last n positions.)"""
        if length >= self.length:
            return
        if self.lean:
            self.cache.length = length  # the slots past it are overwritten by later passes
        else:
            self.cache.crop(length - self.length)


class EagerModels:
    """The eager runner's lender: every run gets a fresh CachedModel of the same weights."""

    def __init__(self, module, vocab_size: int, linear=None):
        self.module, self.vocab_size, self.linear = module, vocab_size, linear

    def claim(self, owner, positions: int, shapes=()) -> CachedModel:
        # room for a check of MAX_K + 1 tokens past the run's positions: a lean cache never grows in a run
        return CachedModel(self.module, self.vocab_size, self.linear, positions=max(positions, 0) + MAX_K + 1)

    @property
    def capture_s(self) -> dict:
        return {}  # nothing is captured

    def release(self, owner) -> None:
        pass  # the run's CachedModel goes with the run
