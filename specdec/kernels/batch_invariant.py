"""Batch invariance: a target pass that gives each row the same bits alone and in a check of K+1.

Speculative decoding checks K+1 tokens in one pass; plain decoding runs them one at a time. Where
every op gives a row the same bits whatever else shares the pass, the two emit the same tokens bit
for bit, ties included (equal logits pick the same argmax). Where an op does not, a last-bit
difference can flip a near-tie, and on the w8a8 kernel much more: the next layer quantizes its
activations to int8, so a last-bit difference can become a whole quantization step, and steps grow
through the layers (speculative output left plain output at top-2 margins up to 0.04 on an AVX2 CPU).

Measured op by op (`python -m specdec check`: one row alone and in checks of 2, 6 and 16 after a
cached prefix, on both runners): embedding, RMSNorm, rotary, residual adds, the MLP's product, the
W8A8 products and torch's weight-only int8 products gave a row the same bits; two ops did not:
- attention over the cache: torch's CPU attention blocks its sums by the query length and by the key
  span it is handed (a one-token pass gets exactly the valid keys and no mask; a check, or any
  static-runner pass, the whole cache with a mask). `torch.ops.specdec.attention_rows`
  (csrc/attention_rows.cpp) computes each (batch, key/value head, query row) alone, over the keys
  that row may see, in key order, one fixed vector layout: `row_attention` in
  specdec/kernels/attention.py, beside every other attention path;
- fp32 linear layers on BLAS (the dense target on a CPU without native bf16): sgemm picks its kernel
  and blocking by the number of rows. `torch.ops.specdec.linear_rows` (csrc/linear_rows.cpp) sums
  each output in one fixed order, streaming the weight once for all rows; specdec/kernels/cpu_linear.py
  routes a batch-invariant model's fp32 products of up to 64 rows to it (a prompt's longer prefill
  stays on BLAS: both runs share it).

`make_batch_invariant(model)` switches a model on a CPU to both (its attention through
`set_attention(model, invariant=True)`) where the kernel library runs (specdec/kernels/w8a8_build.py,
the w8a8 kernel's: built once). Which target kernels are
batch-invariant (`invariant_kernel`, INVARIANT below): `w8a8`, `w4a8`, `int8`, and `dense` in fp32 (the dense
target where the pair runs fp32). Not `dense` in bf16 (oneDNN's bf16 products are blocked by rows:
a check's down_proj moved by one bf16 step, the logits by up to 0.19) nor `q4k` (its products are
partly bf16 dense and torch's int4 kernel); those keep reporting ties.
"""

from __future__ import annotations

from specdec.kernels import w8a8_build
from specdec.kernels.attention import rows_run_on, set_attention

MARK = "specdec_batch_invariant"  # attribute set on a model made batch-invariant (read by cpu_linear.linear_for and start-up's move)


def available(device) -> bool:
    """Whether the kernels run here: a CPU that runs the library (x86 with AVX2, a C++ compiler)."""
    return rows_run_on(device)


def make_batch_invariant(model) -> bool:
    """Run the model's attention through the batch-invariant rows (specdec/kernels/attention.py
    `row_attention`), and mark it so that its fp32 products run in fixed order (cpu_linear.linear_for)
    and a move keeps the rows wherever they run, when it is on a CPU that runs the kernel library
    (built here if it is not yet); True when it does. Idempotent."""
    if not available(model.device) or not hasattr(model, "set_attn_implementation"):
        return False  # (a model without transformers' attention switch, as the tests' bigram model, stays as it is)
    w8a8_build.load()  # both kernels: linear_rows for the fp32 products, attention_rows for the attention
    set_attention(model, invariant=True)
    setattr(model, MARK, True)
    return True


def is_batch_invariant(model) -> bool:
    return bool(getattr(model, MARK, False))


# Target kernels that run batch-invariant with the kernels above, by the pair's dtype (None: any),
# each measured op by op (`python -m specdec check`) and tested (tests/test_batch_invariance.py).
INVARIANT = {
    "w8a8": None,  # W8A8 products exact per row
    "w4a8": None,  # W4A8 products exact per row (its Q6_K layers: W8A8), the Q4_K embedding read row by row
    "int8": None,  # torch's _weight_int8pack_mm sums each output over k in one order, whatever the rows
    "dense": "fp32",  # the dense target in fp32: linear_rows; in bf16 its products are oneDNN's, blocked by rows
}


def invariant_kernel(kernel: str, dtype_name: str, device="cpu") -> bool:
    """Whether target kernel `kernel` in a pair of `dtype_name` on `device` runs batch-invariant here
    (specdec/kernels/target_kernels.py makes it so where this says True)."""
    if kernel not in INVARIANT or not available(device):
        return False
    return INVARIANT[kernel] in (None, dtype_name)
