"""What each device runs honestly: the draft variants, target kernels and lossy lane offered there,
and why the others are not.

The quantized paths are built for torch's CPU kernels: weight-only int8 (`_weight_int8pack_mm`),
int4 (`_weight_int4pack_mm_for_cpu`), and the GGUF's Q4_K blocks fed to that int4 kernel. Off a
CPU, QuantLinear and Q4KLinear (specdec/kernels/quant.py, q4k.py) dequantize their weights back
to a dense matrix on every pass: a variant meant to be cheaper would cost more than the dense one.
So on a GPU only what runs on the dense weights is offered: the weights as loaded (`dense`, the
pair's dtype) and its truncated heads (`-v16k`, `-v32k`: a smaller dense head). A CUDA int4 path
(torch's `_weight_int4pack_mm` has one) is not built here.

The `w8a8` names and `w4a8` run on this project's own x86 kernels (specdec/kernels/w8a8_build.py, one
library): offered on a CPU where it runs (AVX2, a C++ compiler, a build that succeeded), with its
one-line reason, naming the kernel, elsewhere.

Functions of the device's type (and, for w8a8, of this machine): a fake `torch.device("cuda")`
answers as a real one would. The CLI, the page's dropdowns and the Theory tab all read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from specdec.core.variant_names import DENSE, KERNELS, VARIANTS, native_kernel
from specdec.kernels import w8a8_build

CPU_ONLY = {  # weights or kernel -> what it does off a CPU
    "int8": "int8 weights run on torch's CPU int8 kernel; off a CPU each pass would dequantize them to a dense copy",
    "int4": "int4 weights run on torch's CPU int4 kernel; off a CPU each pass would dequantize them to a dense copy",
    "q4k": "Q4_K blocks run on torch's CPU int4 kernel; off a CPU each pass would unpack them to a dense copy",
}
THIS_CPU = SimpleNamespace(type="cpu")  # the device None stands for: the command line's lists, before a pair loads
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


def _offer(names: tuple[str, ...], device, weights_of) -> Offered:
    """`names` on `device`: on a CPU all but the w8a8 / w4a8 ones where that library cannot run;
    elsewhere only the dense weights. weights_of: a name -> its weights (`int4-v32k` -> `int4`)."""
    device = device if device is not None else THIS_CPU
    library_off = w8a8_build.unavailable_reason(device) if any(native_kernel(n) for n in names) else None
    why = {}
    for name in names:
        if native_kernel(name) and library_off:
            why[name] = w8a8_build.unavailable_for(native_kernel(name), device)
        elif device.type != "cpu" and weights_of(name) != DENSE:
            why[name] = _cpu_only_reason(weights_of(name))
    return Offered(tuple(n for n in names if n not in why), why)


def draft_variants(device) -> Offered:
    """The draft variants for `device` (anything with a `.type`, e.g. torch.device; None: this CPU)."""
    return _offer(VARIANTS, device, lambda name: name.partition("-")[0])


def target_kernels(device) -> Offered:
    """The target kernels for `device` (None: this CPU)."""
    return _offer(KERNELS, device, lambda name: name)


def lossy_lane(device) -> str | None:
    """Why the lossy lane (plain decoding on an int4 copy of the target) is not offered on
    `device`; None where it is."""
    return None if (device or THIS_CPU).type == "cpu" else LOSSY_OFF_CPU
