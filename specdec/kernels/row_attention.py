"""Batch-invariant attention on a CPU: each query row's sums over its own valid keys, in key order.

A check of K+1 tokens must give each row the bits a one-token pass gives it, or speculative output
on the w8a8 kernel departs from plain output: the next layer quantizes its activations to int8, so a
last-bit difference can become a whole quantization step, and steps grow through the layers. Measured
(scripts/batch_invariance.py, op by op): on the w8a8 target the only op of a pass whose result for a
row depended on the other rows was attention over the cache. torch's CPU attention blocks its sums by
the query length and the key span it is handed (a one-token pass gets exactly the valid keys and no
mask; a check, or the static runner's pass, the whole cache with a mask), and the last bits move.

`torch.ops.specdec.attention_rows` (specdec/kernels/csrc/attention_rows.cpp, built into the w8a8
kernel's library) computes every (batch, key/value head, query row) alone: the keys the row may see
(the mask's true entries, or the causal rule where there is no mask), their scores, softmax and the
weighted values, in one fixed order. So a row's output is the same bits alone, in a check of any
size, over a DynamicCache or over a preallocated cache with a mask, on any number of threads.

`use_row_attention(model)` switches a model on a CPU to it where the library runs; elsewhere the
model keeps what it had (specdec/models/attention.py's packed sdpa on a CPU).
"""

from __future__ import annotations

import torch

from specdec.kernels import w8a8_build
from specdec.models.attention import packed_sdpa

NAME = "specdec_row_attention"
DTYPES = (torch.float32, torch.bfloat16)  # what the kernel computes; other dtypes go to packed sdpa


def row_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                  dropout: float = 0.0, scaling: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query (B, H, L, D), key and value (B, KV, C, D), attention_mask (B, 1, L, C) bool or None
    (then causal) -> ((B, L, H, D), None), as transformers' attention functions return."""
    mask = attention_mask
    usable = query.dtype in DTYPES and key.dtype == value.dtype == query.dtype and dropout == 0.0
    if not usable or (mask is not None and (mask.dtype != torch.bool or mask.shape[-2] != query.shape[2])):
        return packed_sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    return torch.ops.specdec.attention_rows(query, key, value, mask, scale), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, row_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # bool masks, None where causal suffices


def use_row_attention(model) -> bool:
    """Run the model's attention through `row_attention` when it is on a CPU that runs the kernel's
    library (built here if it is not yet); True when it does."""
    if model.device.type != "cpu" or not w8a8_build.available(model.device)[0]:
        return False
    w8a8_build.load()
    _register()
    model.set_attn_implementation(NAME)
    return True
