"""W8A8 linear layers: int8 weights times int8 activations, quantized per block of each row on every call.

    y[m, n] = (sum_b float(sum_{k in b} qx[m, k] * qw[n, k]) * sx[m, b]) * sw[n]  (+ bias[n])

- Weights: symmetric int8, one fp32 scale per output channel: specdec/kernels/quant.py's int8 form
  (`QuantWeight`, the stored, device-neutral form), packed at load into the kernel's layout (`pack`).
- Activations: each block b of BLOCK = 128 columns of each row (token) m gets its own scale
  sx[m, b] = amax|x[m, b]| / 127 and qx = round(x / sx) in [-127, 127], computed inside the kernel from
  that block alone. Qwen2.5's activations have a few outlier channels, hundreds of times the rest:
  one scale per row would put most of a row on a handful of levels, one per block confines an
  outlier's coarse grid to its own 128 columns (the error against the dense model measured in
  docs/benchmarks.md, "W8A8").
- The sum over a block is int32 arithmetic, exact (and exact as a float: at most 127 * 127 * 128), the
  blocks are added in one fixed order, and the rest of the epilogue is one fixed expression. So a
  row's output is the same bits whether the pass has one row or sixteen: the K+1 rows of a speculative
  check give exactly what K+1 one-token passes give, and speculative decoding stays exact on this
  kernel (one scale for the whole tensor, as torch's dynamic quantization uses, would couple the rows).

The product runs in this project's own C++ kernel (specdec/kernels/csrc/w8a8.cpp, built once:
specdec/kernels/w8a8_build.py). `reference` is the same arithmetic in plain torch, for tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec.kernels import w8a8_build
from specdec.kernels.joined import join, joinable
from specdec.kernels.quant import QuantWeight

TILE = 32  # output channels per tile of the packed layout
GROUP = 4  # input columns per group (the bytes one int32 lane of vpdpbusd sums)
BLOCK = 128  # input columns per activation scale (the kernel's kBlock)
PATHS = w8a8_build.PATHS  # the kernel's instruction-set paths (auto: the best this CPU has)
PATH_ENV = "SPECDEC_W8A8_PATH"  # environment variable forcing a path, e.g. avx2 to run the AVX2 code on an AVX-512 CPU


def path_from_env() -> int:
    """The path $SPECDEC_W8A8_PATH asks for (auto when unset); ValueError naming it when unknown."""
    return w8a8_build.path_from(PATH_ENV)


def pack(q: torch.Tensor) -> torch.Tensor:
    """(N, K) int8 -> packed (ceil(N/32), ceil(K/4), 32, 4) int8, each byte w XOR 0x80 (w + 128 read
    as unsigned, the operand vpdpbusd takes unsigned).

    packed[t, g, c, j] = q[32 t + c, 4 g + j] ^ 0x80, and 0x80 (w = 0) beyond N and K: each 128-byte
    group holds two 64-byte vectors of 16 output channels x 4 consecutive input columns, and a tile's
    groups are contiguous."""
    n, k = q.shape
    padded = F.pad(q, (0, -k % GROUP, 0, -n % TILE))  # (Np, Kp)
    packed = padded.reshape(padded.shape[0] // TILE, TILE, padded.shape[1] // GROUP, GROUP).permute(0, 2, 1, 3).contiguous()
    return packed ^ torch.tensor(-128, dtype=torch.int8)


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
        self.register_buffer("packed", pack(weight.q).to(device))
        self.register_buffer("scale", weight.scale.to(device=device, dtype=torch.float32, copy=True))  # (N,)
        self.register_buffer("bias", None if bias is None else bias.to(device=device, dtype=torch.float32, copy=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype in (torch.float32, torch.bfloat16):
            return torch.ops.specdec.w8a8_linear(x, self.packed, self.scale, self.bias, self.out_features, self.path)
        return self.forward(x.float()).to(x.dtype)

    @classmethod
    def joined(cls, parts: list[W8A8Linear]) -> W8A8Linear | None:
        """`parts` (layers reading the same input) as one layer, same bits (specdec/kernels/joined.py); None
        where they cannot be joined."""
        return join(parts, ("packed", "scale", "bias")) if joinable(parts, TILE) else None

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, int8 weights x int8 activations per {BLOCK} columns"


def quantize_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) float -> (qx (M, K) int8, sx (M, ceil(K / BLOCK)) float32): each block's own scale
    amax / 127 (0 for a zero block), qx = round-half-even(x / sx) clamped to [-127, 127]: what the
    kernel computes."""
    xf = x.float()
    m, k = xf.shape
    blocks = F.pad(xf, (0, -k % BLOCK)).reshape(m, -1, BLOCK)  # (M, B, BLOCK), zero padded
    sx = blocks.abs().amax(dim=2) / 127  # (M, B)
    safe = torch.where(sx > 0, sx, 1.0)[..., None]
    qx = torch.where(sx[..., None] > 0, (blocks / safe).round().clamp(-127, 127), 0.0)
    return qx.reshape(m, -1)[:, :k].to(torch.int8), sx


def reference(x: torch.Tensor, weight: QuantWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The kernel's arithmetic in plain torch (slow, exact): (..., K) -> (..., N) in x's dtype, the
    float operations in the kernel's order."""
    rows = x.reshape(-1, x.shape[-1])
    qx, sx = quantize_blocks(rows)
    qw = weight.q.to(torch.int64)
    part = torch.zeros(rows.shape[0], qw.shape[0])  # (M, N) float32
    for b in range(sx.shape[1]):
        cols = slice(b * BLOCK, (b + 1) * BLOCK)
        exact = qx[:, cols].to(torch.int64) @ qw[:, cols].T  # (M, N), exact integers, |.| <= 127 * 127 * 128
        part = part + exact.float() * sx[:, b : b + 1]
    y = part * weight.scale.float()[None, :]
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype).reshape(*x.shape[:-1], -1)
