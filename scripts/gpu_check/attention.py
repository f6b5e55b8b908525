"""Attention alone: the device's path (specdec/kernels/attention.py) against transformers' `sdpa`,
on each model's heads, in the passes the static and compiled runners make: a boolean mask over the
whole cache, one token (a draft pass) or a check of K + 1 rows, at cache sizes the compiled runner
captures. transformers' `sdpa` copies each key/value head once per query head for a masked pass of
more than one token; the device's path never does. Which is faster on a GPU is what this measures."""

from __future__ import annotations

import statistics
import time
from functools import partial

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from specdec.kernels.attention import PATHS

from .models import shapes
from .passes import CHECK_K

CONTEXTS = (512, 2048, 8192)  # cache sizes of compiled models (capture.CAPTURED_CONTEXTS)
TINY_CONTEXTS = (64,)
CALLS = 10  # calls timed between two waits for the device


class Heads(torch.nn.Module):
    """What transformers' attention functions read of the attention layer."""

    is_causal = True

    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups


def side_by_side(calls: dict, cuda, repeats: int) -> dict[str, float]:
    """Median milliseconds of one call of each, over `repeats` rounds of CALLS calls, the two taking
    turns round by round."""
    rounds = {key: [] for key in calls}
    for _ in range(repeats):
        for key, fn in calls.items():
            cuda.synchronize()
            began = time.perf_counter()
            for _ in range(CALLS):
                fn()
            cuda.synchronize()
            rounds[key].append((time.perf_counter() - began) * 1000 / CALLS)
    return {key: round(statistics.median(times), 4) for key, times in rounds.items()}


def compare(args, cuda) -> dict:
    """Per model, cache size and rows: {"ms": the device's path, "sdpa_ms": transformers' sdpa, and
    the largest difference of their outputs}."""
    if args.device.type not in PATHS:
        return {"attention": "sdpa"}  # nothing of ours to compare
    name_of_path, ours = PATHS[args.device.type]
    out = {"attention": name_of_path}
    g = torch.Generator(device=args.device).manual_seed(0)
    for name, shape in shapes(args).items():
        heads, kv = shape["num_attention_heads"], shape["num_key_value_heads"]
        dim = shape["hidden_size"] // heads
        module = Heads(heads // kv)
        for capacity in TINY_CONTEXTS if args.tiny else CONTEXTS:
            keys, values = (torch.randn(1, kv, capacity, dim, generator=g, device=args.device, dtype=args.dtype) for _ in range(2))
            for rows in (1, *(k + 1 for k in CHECK_K)):
                query = torch.randn(1, heads, rows, dim, generator=g, device=args.device, dtype=args.dtype)
                positions = capacity // 2 + torch.arange(rows, device=args.device)  # (rows,) half the cache valid
                mask = (torch.arange(capacity, device=args.device)[None, :] <= positions[:, None])[None, None]
                calls = {key: partial(fn, module, query, keys, values, mask, scaling=dim**-0.5)
                         for key, fn in (("ms", ours), ("sdpa_ms", sdpa_attention_forward))}  # each -> ((1, rows, heads, dim), None)
                with torch.inference_mode():
                    row = side_by_side(calls, cuda, args.repeats)
                    row["max_difference"] = (calls["ms"]()[0].float() - calls["sdpa_ms"]()[0].float()).abs().max().item()
                out[f"{name} {capacity} x{rows}"] = row
    return out
