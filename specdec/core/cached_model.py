"""A causal LM with its own KV cache that can be extended and rolled back."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from transformers import DynamicCache

SMALL_BATCH_ROWS = 64  # fp32: up to this many tokens per pass the transposed product is faster (measured)
UPCAST_ROWS = 16  # bf16/fp16 without hardware support: from this many tokens on, compute in fp32


def _native_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


NATIVE_BF16 = _native_bf16()


class CpuLinear(TorchFunctionMode):
    """Picks a faster way to compute F.linear(x, W) on a CPU, by the number of token rows in x.
    Thread-local (a torch function mode), active only inside CachedModel.forward.

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
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            rows = x.numel() // x.shape[-1]
            if x.dtype == torch.float32 and rows <= SMALL_BATCH_ROWS:
                y = (weight @ x.reshape(rows, -1).T).T.reshape(*x.shape[:-1], weight.shape[0])  # (..., out)
                return y if bias is None else y + bias
            if x.dtype in (torch.bfloat16, torch.float16) and not NATIVE_BF16 and rows >= UPCAST_ROWS:
                return F.linear(x.float(), weight.float(), None if bias is None else bias.float()).to(x.dtype)
        return func(*args, **kwargs)


class CachedModel:
    def __init__(self, model, vocab_size: int):
        self.model = model
        self.vocab_size = vocab_size  # models of one family may pad their embeddings differently
        self.device = model.device
        self.cache = DynamicCache(config=model.config)
        # CpuLinear only ever changes fp32 products, and half-precision ones on a CPU without native
        # bf16; elsewhere it would only add a Python call to every torch op (about 5 ms of a 32 ms
        # int4 draft pass, AVX-512 BF16 machine), so it is left out.
        dtype = getattr(model, "dtype", torch.float32)
        self.cpu_linear = self.device.type == "cpu" and (dtype == torch.float32 or not NATIVE_BF16)

    @property
    def length(self) -> int:
        """Positions held in the cache."""
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """ids: (n,) tokens after the cached positions -> logits (n, V), or (1, V) if last_only.
        Asking only for the last position's logits skips most of the vocabulary projection."""
        with CpuLinear() if self.cpu_linear else contextlib.nullcontext():
            out = self.model(
                input_ids=ids[None],
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1 if last_only else 0,
            )
        return out.logits[0, :, : self.vocab_size]

    def prefill(self, ids: torch.Tensor) -> None:
        if ids.numel():
            self.forward(ids, last_only=True)

    def crop(self, length: int) -> None:
        """Keep the first `length` positions. (transformers >= 5.24 takes only a negative count:
        crop(-n) drops the last n positions.)"""
        if length < self.length:
            self.cache.crop(length - self.length)
