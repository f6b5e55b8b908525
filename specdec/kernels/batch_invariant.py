"""Batch invariance: a target pass that gives each row the same bits alone and in a check of K+1.

Speculative decoding checks K+1 tokens in one pass; plain decoding runs them one at a time. Where
every op gives a row the same bits whatever else shares the pass, the two emit the same tokens bit
for bit, ties included (equal logits pick the same argmax). Where an op does not, a last-bit
difference can flip a near-tie, and on the w8a8 kernel much more: the next layer quantizes its
activations to int8, so a last-bit difference can become a whole quantization step, and steps grow
through the layers (speculative output left plain output at top-2 margins up to 0.04 on an AVX2 CPU).

Measured op by op (scripts/batch_invariance.py: one row alone and in checks of 2, 6 and 16 after a
cached prefix, on both runners): embedding, RMSNorm, rotary, residual adds, the MLP's product, the
W8A8 products and torch's weight-only int8 products gave a row the same bits; two ops did not:
- attention over the cache: torch's CPU attention blocks its sums by the query length and by the key
  span it is handed (a one-token pass gets exactly the valid keys and no mask; a check, or any
  static-runner pass, the whole cache with a mask). `torch.ops.specdec.attention_rows`
  (csrc/attention_rows.cpp) computes each (batch, key/value head, query row) alone, over the keys
  that row may see, in key order, one fixed vector layout: `row_attention` below;
- fp32 linear layers on BLAS (the dense target on a CPU without native bf16): sgemm picks its kernel
  and blocking by the number of rows. `torch.ops.specdec.linear_rows` (csrc/linear_rows.cpp) sums
  each output in one fixed order, streaming the weight once for all rows; specdec/kernels/cpu_linear.py
  routes a batch-invariant model's fp32 products of up to 64 rows to it (a prompt's longer prefill
  stays on BLAS: both runs share it).

`make_batch_invariant(model)` switches a model on a CPU to both where the kernel library runs
(specdec/kernels/w8a8_build.py, the w8a8 kernel's: built once). Which target kernels are
batch-invariant (`invariant_kernel`, INVARIANT below): `w8a8`, `int8`, and `bf16` in fp32 (the dense
target where the pair runs fp32). Not `bf16` in bf16 (oneDNN's bf16 products are blocked by rows:
a check's down_proj moved by one bf16 step, the logits by up to 0.19) nor `q4k` (its products are
partly bf16 dense and torch's int4 kernel); those keep reporting ties.
"""

from __future__ import annotations

import torch

from specdec.kernels import w8a8_build
from specdec.core.runners.attention import keep_attention, packed_sdpa

NAME = "specdec_row_attention"
DTYPES = (torch.float32, torch.bfloat16)  # what the attention kernel computes; other dtypes go to packed sdpa
MARK = "specdec_batch_invariant"  # attribute set on a model made batch-invariant (read by cpu_linear.linear_for)


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


def available(device) -> bool:
    """Whether the kernels run here: a CPU that runs the library (x86 with AVX2, a C++ compiler)."""
    return getattr(device, "type", str(device)) == "cpu" and w8a8_build.available(device)[0]


def make_batch_invariant(model) -> bool:
    """Run the model's attention through `row_attention`, and mark it so that its fp32 products run
    in fixed order (cpu_linear.linear_for), when it is on a CPU that runs the kernel library (built
    here if it is not yet); True when it does. Idempotent."""
    if not available(model.device) or not hasattr(model, "set_attn_implementation"):
        return False  # (a model without transformers' attention switch, as the tests' bigram model, stays as it is)
    w8a8_build.load()
    _register()
    if model.config._attn_implementation != NAME:
        model.set_attn_implementation(NAME)
    keep_attention(model)  # a runner taking the model keeps these rows while it stays on the CPU
    setattr(model, MARK, True)
    return True


def is_batch_invariant(model) -> bool:
    return bool(getattr(model, MARK, False))


# Target kernels that run batch-invariant with the kernels above, by the pair's dtype (None: any),
# each measured op by op (scripts/batch_invariance.py) and tested (tests/test_batch_invariance.py).
INVARIANT = {
    "w8a8": None,  # W8A8 products exact per row
    "int8": None,  # torch's _weight_int8pack_mm sums each output over k in one order, whatever the rows
    "bf16": "fp32",  # the dense target in fp32: linear_rows; in bf16 its products are oneDNN's, blocked by rows
}


def invariant_kernel(kernel: str, dtype_name: str, device="cpu") -> bool:
    """Whether target kernel `kernel` in a pair of `dtype_name` on `device` runs batch-invariant here
    (specdec/kernels/target_kernels.py makes it so where this says True)."""
    if kernel not in INVARIANT or not available(device):
        return False
    return INVARIANT[kernel] in (None, dtype_name)
