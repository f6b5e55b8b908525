"""A faster F.linear on a CPU, chosen by the number of token rows, and where it is worth entering.

Whoever builds a run's models decides whether their passes run inside this mode
(`runner_model(runner, model, vocab_size, linear=linear_for(model))`); the core loop never asks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from specdec.models.machine import native_bf16

SMALL_BATCH_ROWS = 64  # fp32: up to this many tokens per pass the transposed product is faster (measured)
UPCAST_ROWS = 16  # bf16/fp16 without hardware support: from this many tokens on, compute in fp32


NATIVE_BF16 = native_bf16()  # read once: the CPU does not change under a running process


class CpuLinear(TorchFunctionMode):
    """Picks a faster way to compute F.linear(x, W) on a CPU, by the number of token rows in x.
    Thread-local (a torch function mode), active only inside the passes of the model it is given to.

    fp32, few rows: (W @ x.T).T. Same product, other operand order. For a (n, d) x with n small,
    MKL's sgemm behind F.linear repacks the whole (out, d) weight on every call, which costs about
    a decode step per row: on a 2-core AVX2 EPYC a verify pass over K+1 = 6 tokens took 3x a
    one-token pass. With the weight as the left operand it is streamed once, like a
    matrix-vector product: the lm_head (151936 x 1536) for 8 rows takes 250 ms instead of 800,
    and a 6-token pass about 1.9 one-token passes (docs/benchmarks.md).

    bf16/fp16 on a CPU without native support (AVX2 only), many rows: upcast to fp32. The emulated
    half-precision GEMM costs a full pass per row, so a 200-token prefill of the 0.5B draft took
    8 s in bf16 against 1.8 s upcast. Few rows stay in bf16, where the halved memory traffic wins
    (one-token draft pass: 100 ms bf16, 200 ms fp32).

    Both change only the order of summation (max |logit difference| about 4e-5 in fp32).
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight = args[0], args[1]
            y = self.linear(x, weight, args[2] if len(args) > 2 else kwargs.get("bias"), x.numel() // x.shape[-1])
            if y is not None:
                return y
        return func(*args, **kwargs)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias, rows: int) -> torch.Tensor | None:
        """x (..., in) over `rows` rows -> (..., out) where this mode runs the product its own way, else None."""
        if x.dtype == torch.float32 and rows <= SMALL_BATCH_ROWS:
            y = (weight @ x.reshape(rows, -1).T).T.reshape(*x.shape[:-1], weight.shape[0])  # (..., out)
            return y if bias is None else y + bias
        if x.dtype in (torch.bfloat16, torch.float16) and not NATIVE_BF16 and rows >= UPCAST_ROWS:
            return F.linear(x.float(), weight.float(), None if bias is None else bias.float()).to(x.dtype)
        return None


class FixedOrderLinear(CpuLinear):
    """CpuLinear for a batch-invariant model (specdec/kernels/batch_invariant.py): fp32 products of up
    to SMALL_BATCH_ROWS rows run `torch.ops.specdec.linear_rows`, each output summed in one fixed order
    whatever the number of rows (BLAS blocks its sums by the rows: a check's rows moved in their last
    bits against one-token passes). It streams the weight once for all rows, as the transposed product
    above does (measured: docs/benchmarks.md, "Batch invariance"). Longer passes (a prompt's prefill,
    shared by speculative and plain runs alike) keep CpuLinear's way."""

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias, rows: int) -> torch.Tensor | None:
        if x.dtype == weight.dtype == torch.float32 and rows <= SMALL_BATCH_ROWS and weight.is_contiguous():
            return torch.ops.specdec.linear_rows(x, weight, bias)
        return super().linear(x, weight, bias, rows)


def linear_for(model) -> type[CpuLinear] | None:
    """CpuLinear for a model whose passes it can change (FixedOrderLinear for a batch-invariant one),
    else None. It only ever changes fp32 products, and half-precision ones on a CPU without native
    bf16; elsewhere it would only add a Python call to every torch op (about 5 ms of a 32 ms int4
    draft pass, AVX-512 BF16 machine)."""
    from specdec.kernels.batch_invariant import is_batch_invariant

    dtype = getattr(model, "dtype", torch.float32)
    on_cpu = model.device.type == "cpu"
    if not (on_cpu and (dtype == torch.float32 or not NATIVE_BF16)):
        return None
    return FixedOrderLinear if is_batch_invariant(model) and dtype == torch.float32 else CpuLinear
