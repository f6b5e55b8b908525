"""GGUF's Q4_K format, run by torch's CPU int4 kernel on its own grid.

A Q4_K super-block holds 256 consecutive weights of one row in 144 bytes:

    bytes 0..1    d     float16, the scale of the sub-block scales
    bytes 2..3    dmin  float16, the scale of the sub-block minima
    bytes 4..15   sc[8] and m[8], 6 bits each, packed (see `_scales_and_minima`)
    bytes 16..143 q: 256 4-bit values; byte 32*c + i holds weight i of sub-block 2c in its low
                  nibble and weight i of sub-block 2c+1 in its high nibble (c = 0..3)

and weight i of sub-block j (32 weights) is `d * sc[j] * q - dmin * m[j]`: an affine 4-bit grid
with one scale and one offset per 32 weights. torch's CPU int4 kernel
(`aten._weight_int4pack_mm_for_cpu`, group size 32) computes `(q - 8) * scale + zero` per group, so
the same grid runs there with `scale = d * sc[j]` and `zero = 8 * d * sc[j] - dmin * m[j]`; nothing
is re-quantized. `unpack` gives (q, scale, low = -dmin * m) in float32, where d * sc and dmin * m
are exact (an 11-bit mantissa times a 6-bit integer); the kernel then holds scale and zero in its
activation dtype (exact in float32, rounded to 8 bits of mantissa in bf16).

`quantize` writes Q4_K bytes from a float weight, for models that come without a GGUF (tiny-random,
Hub models): per sub-block of 32 the range [min(w, 0), max(w)] on 16 levels; d and dmin are the
largest sub-block scale and minimum over 63, stored in float16; sc and m round to 6 bits; then q is
chosen for the scales actually stored. No search: llama.cpp's own quantizer searches the ranges,
so its files are closer to the float weights; the format, and so the loading path, is the same.
A row whose width is not a multiple of 256 is padded with zeros to whole super-blocks (`unpack`
drops the padding); rows whose width is not a multiple of 32 cannot use the kernel at all.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SUPER = 256  # weights per super-block
SUB = 32  # weights per sub-block: the int4 kernel's group size
BLOCK_BYTES = 144  # bytes per super-block


def parts(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, n*144) uint8 Q4_K rows -> the stored numbers themselves: q (rows, n*256) uint8 0..15 (the
    padding included), sc and m (rows, n, 8) uint8 0..63, d and dmin (rows, n) float16; weight i of
    sub-block j of super-block s is d[s] * sc[s, j] * q - dmin[s] * m[s, j]."""
    rows = blocks.shape[0]
    b = blocks.reshape(rows, -1, BLOCK_BYTES)  # (rows, n, 144)
    n = b.shape[1]
    d = b[..., 0:2].contiguous().view(torch.float16)[..., 0]  # (rows, n)
    dmin = b[..., 2:4].contiguous().view(torch.float16)[..., 0]
    sc, m = _scales_and_minima(b[..., 4:16])  # (rows, n, 8) each
    packed = b[..., 16:].reshape(rows, n, 4, 1, 32)  # (rows, n, chunk c, 1, i)
    q = torch.cat([packed & 15, packed >> 4], dim=3)  # (rows, n, c, nibble h, i): sub-block 2c + h
    return q.reshape(rows, n * SUPER), sc, m, d, dmin


def unpack(blocks: torch.Tensor, cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, n*144) uint8 Q4_K rows -> q (rows, cols) uint8 0..15, scale and low (rows, cols/32)
    float32, with weight = q * scale + low."""
    q, sc, m, d, dmin = parts(blocks)
    rows, n = d.shape
    scale = (d.float()[..., None] * sc.float()).reshape(rows, n * 8)[:, : cols // SUB]
    low = (-dmin.float()[..., None] * m.float()).reshape(rows, n * 8)[:, : cols // SUB]
    return q[:, :cols].contiguous(), scale.contiguous(), low.contiguous()


def dequantize(blocks: torch.Tensor, cols: int) -> torch.Tensor:
    """(rows, n*144) uint8 -> (rows, cols) float32, as GGUF defines the values."""
    q, scale, low = unpack(blocks, cols)
    rows = q.shape[0]
    w = q.reshape(rows, -1, SUB).float() * scale[..., None] + low[..., None]
    return w.reshape(rows, cols)


def _scales_and_minima(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., 12) uint8 -> sc, m (..., 8) uint8. Bytes 0-3 hold sc[0:4] in their low 6 bits, bytes
    4-7 m[0:4]; sc[4:8] and m[4:8] keep their low 4 bits in bytes 8-11 (sc low nibble, m high) and
    their top 2 bits in the top 2 bits of bytes 0-3 and 4-7."""
    a, b, c = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    sc = torch.cat([a & 63, (c & 15) | ((a >> 6) << 4)], dim=-1)
    m = torch.cat([b & 63, (c >> 4) | ((b >> 6) << 4)], dim=-1)
    return sc, m


def _pack_scales_and_minima(sc: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The inverse of _scales_and_minima: (..., 8) uint8 values 0..63 -> (..., 12) uint8."""
    a = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    b = m[..., :4] | ((m[..., 4:] >> 4) << 6)
    c = (sc[..., 4:] & 15) | ((m[..., 4:] & 15) << 4)
    return torch.cat([a, b, c], dim=-1)


def quantize(weight: torch.Tensor) -> torch.Tensor:
    """(rows, cols) float -> (rows, ceil(cols/256)*144) uint8 Q4_K bytes (see the module docstring)."""
    w = weight.detach().float()
    rows, cols = w.shape
    n = -(-cols // SUPER)
    w = F.pad(w, (0, n * SUPER - cols)).reshape(rows, n, 8, SUB)  # (rows, n, j, i)
    lo = w.amin(dim=-1).clamp(max=0)  # (rows, n, 8): Q4_K's offset -dmin*m is never above zero
    step = (w.amax(dim=-1) - lo) / 15
    minimum = -lo
    d = (step.amax(dim=-1) / 63).half()  # (rows, n)
    dmin = (minimum.amax(dim=-1) / 63).half()
    safe_d = torch.where(d.float() > 0, d.float(), 1.0)[..., None]
    safe_dmin = torch.where(dmin.float() > 0, dmin.float(), 1.0)[..., None]
    sc = (step / safe_d).round().clamp(0, 63).to(torch.uint8)  # (rows, n, 8)
    m = (minimum / safe_dmin).round().clamp(0, 63).to(torch.uint8)
    scale = (d.float()[..., None] * sc.float())[..., None]  # (rows, n, 8, 1): as stored
    low = (-dmin.float()[..., None] * m.float())[..., None]
    q = ((w - low) / torch.where(scale > 0, scale, 1.0)).round().clamp(0, 15).to(torch.uint8)
    q = q.reshape(rows, n, 4, 2, SUB)  # (rows, n, c, h, i): sub-block 2c + h
    qs = (q[:, :, :, 0] | (q[:, :, :, 1] << 4)).reshape(rows, n, 128)
    head = torch.stack([d, dmin], dim=-1).view(torch.uint8)  # (rows, n, 4)
    return torch.cat([head, _pack_scales_and_minima(sc, m), qs], dim=-1).reshape(rows, n * BLOCK_BYTES)


def kernel_fits(rows: int, cols: int) -> bool:
    """Whether a (rows, cols) weight can run in torch's CPU int4 kernel at group size 32."""
    return cols % SUB == 0 and rows % 16 == 0


class Q4KLinear(nn.Module):
    """A drop-in for nn.Linear whose weight is Q4_K rows, run by torch's CPU int4 kernel.

    `compute` is the kernel's activation dtype (inputs are cast to it and the output back), so the
    rest of the model keeps the pair's dtype. Off a CPU the weight is dequantized on the fly."""

    def __init__(self, blocks: torch.Tensor, cols: int, bias: torch.Tensor | None, dtype: torch.dtype,
                 compute: torch.dtype, device: torch.device):
        super().__init__()
        q, scale, low = unpack(blocks, cols)  # (out, in), (out, in/32) x2
        self.in_features, self.out_features = cols, q.shape[0]
        self.compute, self.kernel = compute, device.type == "cpu"
        self.bias = None if bias is None else nn.Parameter(bias.to(device=device, dtype=dtype), requires_grad=False)
        if self.kernel:
            self.register_buffer("q", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1))
            # (in/32, out, 2): per group, (scale, zero) with w = (q - 8) * scale + zero
            zero = low + 8 * scale
            self.register_buffer("scale_zero", torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous().to(compute))
        else:
            self.register_buffer("blocks", blocks.to(device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)  # (n, in)
        if self.kernel:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows.to(self.compute), self.q, SUB, self.scale_zero).to(x.dtype)
        else:
            y = F.linear(rows, dequantize(self.blocks, self.in_features).to(x.dtype))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)  # (..., out)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, Q4_K on the int4 kernel ({self.compute})"


class Q4KEmbedding(nn.Module):
    """A drop-in for nn.Embedding with Q4_K rows: a lookup dequantizes only the rows it reads,
    exactly as GGUF defines them."""

    def __init__(self, blocks: torch.Tensor, cols: int, dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.cols, self.dtype = cols, dtype
        self.register_buffer("blocks", blocks.to(device))  # (vocab, n*144) uint8

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = dequantize(self.blocks[ids.reshape(-1)], self.cols)  # (n, d)
        return rows.to(self.dtype).reshape(*ids.shape, self.cols)
