"""What each device runs honestly: the draft variants, target kernels and lossy lane offered there,
and why the others are not.

The quantized paths are built for torch's CPU kernels: weight-only int8 (`_weight_int8pack_mm`),
int4 (`_weight_int4pack_mm_for_cpu`), and the GGUF's Q4_K blocks fed to that int4 kernel. Off a
CPU, QuantLinear and Q4KLinear (specdec/kernels/quant.py, q4k.py) dequantize their weights back
to a dense matrix on every pass: a variant meant to be cheaper would cost more than the dense one.
So on a GPU only what runs on the dense weights is offered: the weights as loaded (`bf16`, the
pair's dtype) and its truncated heads (`-v16k`, `-v32k`: a smaller dense head). A CUDA int4 path
(torch's `_weight_int4pack_mm` has one) is not built here.

Pure functions of the device's type: a fake `torch.device("cuda")` answers as a real one would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec.core.variant_names import KERNELS, VARIANTS

DENSE = "bf16"  # the weights as loaded: dense, in the pair's dtype, on every device
CPU_ONLY = {  # weights or kernel -> what it does off a CPU
    "int8": "int8 weights run on torch's CPU int8 kernel; off a CPU each pass would dequantize them to a dense copy",
    "int4": "int4 weights run on torch's CPU int4 kernel; off a CPU each pass would dequantize them to a dense copy",
    "q4k": "Q4_K blocks run on torch's CPU int4 kernel; off a CPU each pass would unpack them to a dense copy",
}
LOSSY_OFF_CPU = "the lossy lane's int4 target runs on torch's CPU int4 kernel; off a CPU each pass would dequantize it"


@dataclass(frozen=True)
class Offered:
    """Names a control may list on a device, in their usual order, and why each other is left out."""

    names: tuple[str, ...]
    not_offered: dict[str, str] = field(default_factory=dict)  # name -> why

    def explain(self, device_type: str) -> str:
        """One sentence, the names that share a reason together; "" when everything is offered."""
        by_reason: dict[str, list[str]] = {}
        for name, why in self.not_offered.items():
            by_reason.setdefault(why, []).append(name)
        if not by_reason:
            return ""
        return f"Not offered on {device_type}: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items()) + "."

    def check(self, field_name: str, name: str, device_type: str) -> str:
        """`name` when offered; ValueError naming the field and the reason otherwise."""
        if name in self.not_offered:
            raise ValueError(f"{field_name} {name!r} is not offered on {device_type}: {self.not_offered[name]}")
        return name


def _cpu_only_reason(name: str) -> str:
    return CPU_ONLY.get(name, f"{name} is built for torch's CPU kernels only")


def draft_variants(device) -> Offered:
    """The draft variants for `device` (anything with a `.type`, e.g. torch.device)."""
    if device.type == "cpu":
        return Offered(VARIANTS)
    weights_of = {name: name.partition("-")[0] for name in VARIANTS}
    names = tuple(n for n in VARIANTS if weights_of[n] == DENSE)
    return Offered(names, {n: _cpu_only_reason(weights_of[n]) for n in VARIANTS if n not in names})


def target_kernels(device) -> Offered:
    """The target kernels for `device`."""
    if device.type == "cpu":
        return Offered(KERNELS)
    return Offered((DENSE,), {k: _cpu_only_reason(k) for k in KERNELS if k != DENSE})


def lossy_lane(device) -> str | None:
    """Why the lossy lane (plain decoding on an int4 copy of the target) is not offered on
    `device`; None where it is."""
    return None if device.type == "cpu" else LOSSY_OFF_CPU
