"""W4A8 linear layers: 4-bit weights on GGUF's Q4_K grid times int8 activations quantized per block of
each row on every call, summed in integers.

    weight[n, k] = d[n, s] * sc[n, j] * q[n, k] - dmin[n, s] * m[n, j]   (k in sub-block j of super-block s)
    y[m, n] = sum over halves h, in order, of (float(S) * d[n, s] - float(M) * dmin[n, s]) * sx[m, h]  (+ bias[n])
    S = sum_{j in h} sc[n, j] * sum_{k in j} qx[m, k] * q[n, k],   M = sum_{j in h} m[n, j] * sum_{k in j} qx[m, k]

- Weights: Q4_K exactly as GGUF stores it (specdec/kernels/q4k.py `parts`): per super-block of 256
  columns an fp16 d and dmin, per sub-block of 32 a 6-bit scale sc and a 6-bit minimum m, per weight a
  4-bit code q. Nothing is re-quantized: the kernel computes the GGUF's own values. Packed for the kernel
  (`pack`) at 4736 bytes per 32 channels x 256 columns: 4.625 bits a weight (GGUF's 4.5, the 6-bit sc
  and m held in whole bytes), where w8a8 takes 8 bits and a scale per channel.
- Activations: int8 per block of 128 columns of each row, the same quantization as the W8A8 kernel's
  (csrc/activation_blocks.h, `w8a8.quantize_blocks`): a half super-block is one activation block.
- Exact: S and M are integer sums (|S| < 2^24, so float(S) is exact too), the halves are added in one
  fixed order, and the epilogue is one fixed float expression, so a row's output is the same bits alone
  or among the K+1 rows of a check (batch-invariant), on every instruction-set path (AVX2, AVX-512 VNNI, AMX). llama.cpp's Q4_K x
  Q8_K product is built the same way (integer sums scaled by the 6-bit sc and m, then d and dmin), with
  activation blocks of 256 where ours are 128.

The product runs in this project's C++ kernel (specdec/kernels/csrc/w4a8.cpp, in the W8A8 kernel's
library: specdec/kernels/w8a8_build.py). `reference` is the same arithmetic in torch's int64, for tests.

The W4A8 target (specdec/kernels/target_kernels.py, `assemble_q4k` with kernel "w4a8"): every Q4_K
linear layer of the GGUF on this kernel; the GGUF's Q6_K tensors (the output head, half of `ffn_down`
and `attn_v`: 24% of the weights) on the W8A8 kernel, re-quantized per output channel from their exact
dequantized values. Why int8 there and not 4 bits: Q6_K keeps 6 bits with a scale per 16 weights; 4
bits per 32 would coarsen the layers llama.cpp's Q4_K_M chose to keep wide (the head above all), while
int8 per channel is about as fine as Q6_K and runs on a kernel with the same exact, batch-invariant
arithmetic. Its cost is bytes: the Q6_K quarter streams at 8 bits, so a token streams about 0.70 of
w8a8's bytes instead of 0.58 (counted from the shapes). A Q6_K path in this kernel (6-bit codes that
fit a byte, integer scales per 16) would keep those tensors exactly too.
Pairs without a GGUF (tiny-random, Hub models) get Q4_K bytes from specdec/kernels/q4k.py `quantize`
for every linear layer and the head, as the q4k kernel does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec.kernels import q4k, w8a8_build
from specdec.kernels.joined import join, joinable

TILE = 32  # output channels per record (two vectors of 16 int32 lanes)
SUPER = q4k.SUPER  # 256 columns per super-block
SUB = q4k.SUB  # 32 columns per sub-block
HALF = 128  # columns per activation block: half a super-block (w8a8.BLOCK)
RECORD = SUPER * TILE // 2 + 2 * 8 * TILE + 2 * 2 * TILE  # 4736 bytes: codes, sc and m, d and dmin (fp16)
PATHS = w8a8_build.PATHS  # the kernel's instruction-set paths (auto: the best this CPU has)
PATH_ENV = "SPECDEC_W4A8_PATH"  # environment variable forcing a path, e.g. avx2 to run the AVX2 code on an AVX-512 CPU


def path_from_env() -> int:
    """The path $SPECDEC_W4A8_PATH asks for (auto when unset); ValueError naming it when unknown."""
    return w8a8_build.path_from(PATH_ENV)


def pack(q: torch.Tensor, sc: torch.Tensor, m: torch.Tensor, d: torch.Tensor, dmin: torch.Tensor) -> torch.Tensor:
    """q (N, Kp) uint8 0..15, sc and m (N, S, 8) uint8, d and dmin (N, S) float16, Kp = 256 S ->
    (ceil(N/32), S, RECORD) uint8, the kernel's layout (csrc/w4a8.cpp): per 32 channels and super-block,
    codes[j][p][c][i] = q[c, 32j + 4p + i] | q[c, 32j + 16 + 4p + i] << 4, then sc[j][c], m[j][c], d[c],
    dmin[c]; channels beyond N all zero."""
    n, kp = q.shape
    supers, pad = kp // SUPER, -n % TILE
    q, sc, m = (F.pad(t, (0, 0) * (t.dim() - 1) + (0, pad)) for t in (q, sc, m))
    d, dmin = (F.pad(t.view(torch.uint8).reshape(n, supers, 2), (0, 0, 0, 0, 0, pad)) for t in (d, dmin))
    tiles = (n + pad) // TILE
    codes = q.reshape(tiles, TILE, supers, 8, 2, 4, 4)  # (t, c, s, j, nibble, p, i): column 16 nibble + 4p + i
    codes = (codes[:, :, :, :, 0] | (codes[:, :, :, :, 1] << 4)).permute(0, 2, 3, 4, 1, 5)  # (t, s, j, p, c, i)
    per_sub = [t.reshape(tiles, TILE, supers, 8).permute(0, 2, 3, 1) for t in (sc, m)]  # (t, s, j, c)
    halves = [t.reshape(tiles, TILE, supers, 2).permute(0, 2, 1, 3) for t in (d, dmin)]  # (t, s, c, 2 bytes)
    parts = [codes, *per_sub, *halves]
    return torch.cat([p.reshape(tiles, supers, -1) for p in parts], dim=2).contiguous()


class W4A8Linear(nn.Module):
    """A drop-in for nn.Linear computing in W4A8 (see the module docstring) from Q4_K rows
    ((out, n*144) uint8, `cols` input columns); the output has the input's dtype (bf16 or fp32; other
    float inputs are computed from fp32)."""

    def __init__(self, blocks: torch.Tensor, cols: int, bias: torch.Tensor | None, device: torch.device, path: int | None = None):
        super().__init__()
        w8a8_build.require_for("w4a8", device)
        w8a8_build.load()
        self.out_features, self.in_features = blocks.shape[0], cols
        self.path = path_from_env() if path is None else path
        self.register_buffer("packed", pack(*q4k.parts(blocks)).to(device))
        self.register_buffer("bias", None if bias is None else bias.to(device=device, dtype=torch.float32, copy=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype in (torch.float32, torch.bfloat16):
            return torch.ops.specdec.w4a8_linear(x, self.packed, self.bias, self.out_features, self.path)
        return self.forward(x.float()).to(x.dtype)

    @classmethod
    def joined(cls, parts: list[W4A8Linear]) -> W4A8Linear | None:
        """`parts` (layers reading the same input) as one layer, same bits (specdec/kernels/joined.py); None
        where they cannot be joined."""
        return join(parts, ("packed", "bias")) if joinable(parts, TILE) else None

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, Q4_K weights x int8 activations per {HALF} columns"


def reference(x: torch.Tensor, blocks: torch.Tensor, cols: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The kernel's arithmetic in plain torch (slow, exact): (..., cols) -> (..., N) in x's dtype; the
    sums in int64, the float operations in the kernel's order."""
    from specdec.kernels.w8a8 import quantize_blocks

    q, sc, m, d, dmin = q4k.parts(blocks)  # (N, Kp), (N, S, 8) x2, (N, S) x2
    rows = x.reshape(-1, cols)
    n, kp = q.shape
    qx, sx = quantize_blocks(rows)  # (M, cols) int8, (M, ceil(cols / 128))
    qx = F.pad(qx.to(torch.int64), (0, kp - cols))  # (M, Kp): zero beyond the input
    sx = F.pad(sx, (0, kp // HALF - sx.shape[1]))  # (M, Kp / 128): an all-zero block's scale is 0
    subs = kp // SUB
    isum = torch.einsum("mjk,njk->mnj", qx.reshape(-1, subs, SUB), q.to(torch.int64).reshape(n, subs, SUB))  # (M, N, subs)
    xsum = qx.reshape(-1, subs, SUB).sum(-1)  # (M, subs)
    scaled = (isum * sc.reshape(n, subs).to(torch.int64)).reshape(-1, n, subs // 4, 4).sum(-1)  # (M, N, halves) S
    mins = (xsum[:, None, :] * m.reshape(n, subs).to(torch.int64)).reshape(-1, n, subs // 4, 4).sum(-1)  # (M, N, halves) M
    part = torch.zeros(rows.shape[0], n)  # (M, N) float32
    for h in range(kp // HALF):
        c = scaled[:, :, h].float() * d[:, h // 2].float() - mins[:, :, h].float() * dmin[:, h // 2].float()
        part = part + c * sx[:, h : h + 1]
    if bias is not None:
        part = part + bias.float()
    return part.to(x.dtype).reshape(*x.shape[:-1], n)
