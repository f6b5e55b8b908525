"""Weight-only int8 / int4 quantization of linear layers and embeddings, this project's own.

Only the weights are quantized; activations stay in the model's dtype. That is what pays on a
CPU at one token per pass: the pass streams every weight once from memory, so halving or
quartering the bytes cuts its time, while the arithmetic stays cheap.

Two forms of each quantized weight:
- `QuantWeight`, the stored form (plain tensors, device-neutral): what is cached on disk;
- the modules below, built from it for one device: on a CPU they call torch's own weight-only
  kernels (`aten._weight_int8pack_mm`, `aten._weight_int4pack_mm_for_cpu`), which take the int4
  weight in a packed layout of their own; elsewhere (CUDA, untested here) they dequantize the
  weight on the fly, which is exact but not fast (torch's CUDA int4 kernel `_weight_int4pack_mm`
  is the place to start on a GPU).

int8: symmetric, one scale per output row: w = q * scale, q in -127..127.
int4: affine, one scale and zero point per group of `group` input columns:
w = (q - 8) * scale + zero, q in 0..15. The range of each group is chosen by a small search that
minimises the squared error (clipping the extremes often wins), not simply min..max. scale and
zero are stored in bfloat16, the form torch's CPU kernel takes them in, so that the kernel
computes exactly the weights `dequantize()` gives (a zero point rounded on its way to the kernel
moved some weights of the real draft by whole steps: docs/benchmarks.md, "The int4 zero point").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

INT4_GROUP = 32  # input columns per int4 scale; the CPU kernel takes 32, 64, 128 or 256
CLIP_CANDIDATES = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75)  # fractions of a group's range tried by the int4 search
QUANT_FORMAT = 2  # what quantize() stores and how it chooses it; bump it with any change there (cached variants are rebuilt)


def quantizer_parameters() -> dict:
    """Everything of this module that a stored quantized weight depends on (part of the cache key)."""
    return {"format": QUANT_FORMAT, "int4_group": INT4_GROUP, "clip_candidates": list(CLIP_CANDIDATES)}


@dataclass
class QuantWeight:
    """A quantized (out, in) weight in its stored form."""

    bits: int  # 8 or 4
    q: torch.Tensor  # int8 (out, in) | uint8 (out, in/2), two columns per byte, even column in the low nibble
    scale: torch.Tensor  # int8: float32 (out,) | int4: bfloat16 (out, in/group)
    zero: torch.Tensor | None  # int4 only: bfloat16 (out, in/group), the value of q = 8
    group: int = 0  # int4 only

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        out = {f"{prefix}.q": self.q, f"{prefix}.scale": self.scale}
        if self.zero is not None:
            out[f"{prefix}.zero"] = self.zero
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], prefix: str, bits: int, group: int) -> "QuantWeight":
        return cls(bits, tensors[f"{prefix}.q"], tensors[f"{prefix}.scale"], tensors.get(f"{prefix}.zero"), group)

    def dequantize(self) -> torch.Tensor:
        """(out, in) float32."""
        if self.bits == 8:
            return self.q.float() * self.scale[:, None]
        q = unpack_nibbles(self.q).float()  # (out, in)
        out, cols = q.shape
        q = q.reshape(out, cols // self.group, self.group)
        return ((q - 8) * self.scale.float()[..., None] + self.zero.float()[..., None]).reshape(out, cols)


def quantize(weight: torch.Tensor, bits: int, group: int = INT4_GROUP) -> QuantWeight:
    """(out, in) float weight -> its int8 or int4 form."""
    w = weight.detach().float()
    if bits == 8:
        scale = (w.abs().amax(dim=1) / 127).clamp_min(1e-12)  # (out,)
        q = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
        return QuantWeight(8, q, scale, None)
    if bits != 4:
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")
    out, cols = w.shape
    if cols % group:
        raise ValueError(f"int4 needs the input width ({cols}) to be a multiple of the group size ({group})")
    groups = w.reshape(out, cols // group, group)  # (out, G, group)
    lo, hi = groups.amin(dim=-1), groups.amax(dim=-1)  # (out, G)
    best = None  # (err, scale, zero), each (out, G)
    for frac in CLIP_CANDIDATES:  # shrink the range around its middle; keep the best per group
        mid, half = (hi + lo) / 2, (hi - lo) / 2 * frac
        # Rounded to bfloat16 before q is chosen and the error measured: q is the best choice for the
        # values actually kept, and the search judges each range by what will really be computed.
        scale = to_stored((2 * half / 15).clamp_min(1e-6))
        zero = to_stored(mid - half + 8 * scale)
        q = ((groups - zero[..., None]) / scale[..., None]).round().clamp(-8, 7)
        err = (q * scale[..., None] + zero[..., None] - groups).square().sum(dim=-1)  # (out, G)
        if best is None:
            best = (err, scale, zero)
        else:
            better = err < best[0]
            best = tuple(torch.where(better, new, old) for new, old in zip((err, scale, zero), best))
    _, scale, zero = best
    q = ((groups - zero[..., None]) / scale[..., None]).round().clamp(-8, 7) + 8
    return QuantWeight(4, pack_nibbles(q.to(torch.uint8).reshape(out, cols)), scale.bfloat16(), zero.bfloat16(), group)


def to_stored(x: torch.Tensor) -> torch.Tensor:
    """float32 -> the nearest bfloat16 value, as float32 (what int4 scale and zero are stored in)."""
    return x.bfloat16().float()


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """(out, in) values 0..15 -> (out, in/2) uint8, even column in the low nibble."""
    q = q.to(torch.uint8)
    return q[:, 0::2] | (q[:, 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """(out, in/2) uint8 -> (out, in) uint8 values 0..15."""
    return torch.stack([packed & 15, packed >> 4], dim=-1).reshape(packed.shape[0], -1)


class QuantLinear(nn.Module):
    """A drop-in for nn.Linear with a quantized weight (the bias, if any, stays in float)."""

    def __init__(self, weight: QuantWeight, bias: torch.Tensor | None, dtype: torch.dtype, device: torch.device,
                 kernel: bool | None = None):
        super().__init__()
        self.bits, self.group = weight.bits, weight.group
        self.out_features = weight.q.shape[0]
        self.in_features = weight.q.shape[1] * (2 if weight.bits == 4 else 1)
        # torch's weight-only CPU kernels on a CPU; elsewhere (or kernel=False) dequantize on the fly
        self.kernel = device.type == "cpu" if kernel is None else kernel
        self.bias = None if bias is None else nn.Parameter(bias.to(device=device, dtype=dtype), requires_grad=False)
        if self.kernel and weight.bits == 8:
            # copy=True: tensors read from a safetensors file may sit at offsets the kernel's
            # vector loads cannot take (a segfault, not an error); a fresh allocation is aligned.
            self.register_buffer("q", weight.q.to(device, copy=True))
            self.register_buffer("scale", weight.scale.to(device=device, dtype=dtype, copy=True))
        elif self.kernel:
            # The CPU kernel wants its own packed layout and (in/group, out, 2) scales and zeros with
            # w = (q - 8) * scale + zero: the stored form itself, in bfloat16 (exact in bf16 and fp32).
            self.register_buffer("q", torch.ops.aten._convert_weight_to_int4pack_for_cpu(unpack_nibbles(weight.q).to(torch.int32), 1))
            scale_zero = torch.stack([weight.scale, weight.zero], dim=-1)  # (out, in/group, 2)
            self.register_buffer("scale", scale_zero.transpose(0, 1).contiguous().to(dtype))
        else:
            self.register_buffer("q", weight.q.to(device))
            self.register_buffer("scale", weight.scale.to(device))
            self.register_buffer("zero", None if weight.zero is None else weight.zero.to(device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)  # (n, in)
        if self.kernel and self.bits == 8:
            y = torch.ops.aten._weight_int8pack_mm(rows, self.q, self.scale)
        elif self.kernel:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.q, self.group, self.scale)
        else:
            stored = QuantWeight(self.bits, self.q, self.scale, getattr(self, "zero", None), self.group)
            y = F.linear(rows, stored.dequantize().to(x.dtype))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)  # (..., out)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, int{self.bits}" + (f", group={self.group}" if self.bits == 4 else "")


class QuantEmbedding(nn.Module):
    """A drop-in for nn.Embedding with int8 or int4 rows: a lookup dequantizes only the rows it reads."""

    def __init__(self, weight: QuantWeight, dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.bits, self.group, self.dtype = weight.bits, weight.group, dtype
        self.register_buffer("q", weight.q.to(device))
        self.register_buffer("scale", weight.scale.to(device))
        self.register_buffer("zero", None if weight.zero is None else weight.zero.to(device))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        rows = QuantWeight(self.bits, self.q[flat], self.scale[flat], None if self.zero is None else self.zero[flat], self.group)
        return rows.dequantize().to(self.dtype).reshape(*ids.shape, -1)  # (..., d)


def module_bytes(model: nn.Module) -> int:
    """Bytes of a model's parameters and buffers, each storage counted once (tied weights share one)."""
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total
