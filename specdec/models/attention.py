"""Attention on a CPU with each key/value head's query heads packed as rows of one product.

Qwen2.5 shares each key/value head among several query heads (grouped-query attention: 6 query
heads per key/value head in the 1.5B target, 7 in the 0.5B draft). transformers' `sdpa` hands
that to torch as `enable_gqa=True` whenever there is no mask, which is every one-token pass, and
torch 2.13's CPU kernel is slow there in bf16: one query token over 200 cached positions took
0.51 ms a layer, 14 ms of a 28-layer pass (AVX-512 BF16 machine, one thread; docs/benchmarks.md,
"W8A8"). The same product with the query heads of each group stacked as rows of one query,
(batch, kv_heads, group * q_len, dim) against (batch, kv_heads, kv_len, dim), took 0.06 ms: the
same sums over the same keys, one call per key/value head. `packed_sdpa` always computes it so,
with the causal mask (and any padding mask) repeated for the stacked rows.

`use_packed_attention(model)` switches a model on a CPU to it; elsewhere (CUDA) models keep `sdpa`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "specdec_packed_sdpa"


def packed_sdpa(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                dropout: float = 0.0, scaling: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query (B, H, L, D), key and value (B, KV, C, D), attention_mask (B, 1, L, C) bool or None
    (then causal) -> ((B, L, H, D), None), as transformers' attention functions return."""
    b, h, length, d = query.shape
    kv, c = key.shape[1], key.shape[2]
    group = h // kv
    q = query.reshape(b, kv, group * length, d)  # row r * L + i: query head (g * group + r), position i
    mask = attention_mask
    if mask is None and length > 1:  # causal, the last query position seeing every key
        mask = torch.ones(length, c, dtype=torch.bool, device=query.device).tril(c - length)[None, None]
    if mask is not None and mask.shape[-2] == length and group > 1:
        mask = mask.repeat(1, 1, group, 1)  # (B, 1, group * L, C): the same rows for every stacked head
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return out.reshape(b, h, length, d).transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, packed_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks sdpa gets (None where causal suffices)


def use_packed_attention(model) -> None:
    """Run the model's attention through `packed_sdpa` when it is on a CPU (a no-op elsewhere)."""
    if model.device.type != "cpu":
        return
    _register()
    model.set_attn_implementation(NAME)
