"""W8A8 linear layers: int8 weights times int8 activations, quantized per row on every call.

    y[m, n] = float(sum_k qx[m, k] * qw[n, k]) * sx[m] * sw[n]  (+ bias[n])

- Weights: symmetric int8, one fp32 scale per output channel: specdec/kernels/quant.py's int8 form
  (`QuantWeight`, the stored, device-neutral form), packed at load into the kernel's layout (`pack`).
- Activations: each row (token) m gets its own scale sx[m] = amax|x[m, :]| / 127 and
  qx = round(x / sx) in [-127, 127], computed inside the kernel from that row alone.
- The sum over k is int32 arithmetic, exact; the float epilogue is one fixed expression. So a row's
  output is the same bits whether the pass has one row or sixteen: the K+1 rows of a speculative
  check give exactly what K+1 one-token passes give, and speculative decoding stays exact on this
  kernel (one scale for the whole tensor, as torch's dynamic quantization uses, would couple the rows).

The product runs in this project's own C++ kernel (specdec/kernels/csrc/w8a8.cpp, built once:
specdec/kernels/w8a8_build.py). `reference` is the same arithmetic in plain torch, for tests.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from specdec.kernels import w8a8_build
from specdec.kernels.quant import QuantWeight

TILE = 32  # output channels per tile of the packed layout
GROUP = 4  # input columns per group (the bytes one int32 lane of vpdpbusd sums)
PATHS = {"auto": 0, "avx2": 1, "avx512": 2}  # the kernel's instruction-set paths (auto: the best this CPU has)
PATH_ENV = "SPECDEC_W8A8_PATH"  # environment variable forcing a path, e.g. avx2 to run the AVX2 code on an AVX-512 CPU


def path_from_env() -> int:
    """The path $SPECDEC_W8A8_PATH asks for (auto when unset); ValueError naming it when unknown."""
    name = os.environ.get(PATH_ENV, "auto").strip().lower() or "auto"
    if name not in PATHS:
        raise ValueError(f"{PATH_ENV} must be one of {', '.join(PATHS)}, got {name!r}")
    return PATHS[name]


def pack(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) int8 -> (packed (ceil(N/32), ceil(K/4), 32, 4) int8, colsum (ceil(N/32) * 32,) int32).

    packed[t, g, c, j] = q[32 t + c, 4 g + j], zero beyond N and K: each 128-byte group holds two
    64-byte vectors of 16 output channels x 4 consecutive input columns (what vpdpbusd takes), and a
    tile's groups are contiguous. colsum[n] = sum_k q[n, k] undoes the kernel's u8 = q + 128 offset."""
    n, k = q.shape
    padded = F.pad(q, (0, -k % GROUP, 0, -n % TILE))  # (Np, Kp)
    packed = padded.reshape(padded.shape[0] // TILE, TILE, padded.shape[1] // GROUP, GROUP).permute(0, 2, 1, 3).contiguous()
    return packed, padded.sum(dim=1, dtype=torch.int32)


class W8A8Linear(nn.Module):
    """A drop-in for nn.Linear computing in W8A8 (see the module docstring); the output has the
    input's dtype (bf16 or fp32; other float inputs are computed from fp32)."""

    def __init__(self, weight: QuantWeight, bias: torch.Tensor | None, device: torch.device, path: int | None = None):
        super().__init__()
        if weight.bits != 8:
            raise ValueError(f"a W8A8 layer takes an int8 weight, got int{weight.bits}")
        w8a8_build.require(device)
        w8a8_build.load()
        self.out_features, self.in_features = weight.q.shape
        self.path = path_from_env() if path is None else path
        packed, colsum = pack(weight.q)
        self.register_buffer("packed", packed.to(device))
        self.register_buffer("colsum", colsum.to(device))
        self.register_buffer("scale", weight.scale.to(device=device, dtype=torch.float32, copy=True))  # (N,)
        self.register_buffer("bias", None if bias is None else bias.to(device=device, dtype=torch.float32, copy=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype in (torch.float32, torch.bfloat16):
            return torch.ops.specdec.w8a8_linear(x, self.packed, self.scale, self.colsum, self.bias, self.out_features, self.path)
        return self.forward(x.float()).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, int8 weights x int8 activations per row"


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) float -> (qx (M, K) int8, sx (M,) float32): each row's own scale amax / 127 (0 for a
    zero row), qx = round-half-even(x / sx) clamped to [-127, 127]: what the kernel computes."""
    xf = x.float()
    sx = xf.abs().amax(dim=1) / 127  # (M,)
    safe = torch.where(sx > 0, sx, 1.0)[:, None]
    qx = torch.where(sx[:, None] > 0, (xf / safe).round().clamp(-127, 127), 0.0)
    return qx.to(torch.int8), sx


def reference(x: torch.Tensor, weight: QuantWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The kernel's arithmetic in plain torch (slow, exact): (..., K) -> (..., N) in x's dtype."""
    rows = x.reshape(-1, x.shape[-1])
    qx, sx = quantize_rows(rows)
    acc = qx.to(torch.int64) @ weight.q.to(torch.int64).T  # (M, N), exact
    y = acc.float() * sx[:, None] * weight.scale.float()[None, :]
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype).reshape(*x.shape[:-1], -1)
