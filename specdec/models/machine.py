"""Facts about this machine, each read in this one place (and /proc/cpuinfo only once): the CPU's
model name and feature flags, whether it runs bf16 natively, its cores and memory; the kind of
machine that measured defaults are keyed on; and the description that runs and benchmarks record.

Nothing here imports torch until a fact needs it, so the light callers (building llama-server,
vLLM's environment) stay light.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform

REPORTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")  # the ones that decide which kernels are fast here


@functools.cache
def cpuinfo() -> str | None:
    """The text of /proc/cpuinfo, or None where there is none to read (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _cpuinfo_field(*keys: str) -> str | None:
    """The value of the first /proc/cpuinfo line that starts with one of `keys` (the first CPU's)."""
    for line in (cpuinfo() or "").splitlines():
        if line.startswith(keys):
            return line.split(":", 1)[1].strip() if ":" in line else ""
    return None


def cpu_flags() -> tuple[str, ...]:
    """The CPU's feature flags in /proc/cpuinfo's order ("flags" on x86, "Features" on Arm); () when unknown."""
    return tuple((_cpuinfo_field("flags", "Features") or "").split())


def reported_flags() -> list[str]:
    """Which of REPORTED_FLAGS this CPU has (what `lscpu | grep -o avx512_bf16` shows)."""
    flags = cpu_flags()
    return [flag for flag in REPORTED_FLAGS if flag in flags]


def cpu_model() -> str:
    """The CPU's model name, else what the platform module says of the processor."""
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


def cores() -> int | None:
    return os.cpu_count()


def ram_gb() -> float | None:
    """Total memory in GiB, one decimal (None where /proc/meminfo cannot be read)."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        with open("/proc/meminfo") as f:
            return round(int(next(line for line in f if line.startswith("MemTotal")).split()[1]) / 2**20, 1)
    return None


@functools.cache
def native_bf16() -> bool:
    """Whether the CPU computes bf16 in hardware (AVX-512 BF16, AMX), as torch's oneDNN decides:
    elsewhere bf16 is emulated, and slower than fp32 for many rows."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def zero_gpu(environ=None) -> bool:
    """Whether this process runs on a ZeroGPU Space: the variable the platform sets, read the way
    the `spaces` package reads it. There CUDA is emulated in the app's process until a GPU call."""
    value = (os.environ if environ is None else environ).get("SPACES_ZERO_GPU", "")
    return value.strip().lower() in ("1", "t", "true")


def machine_kind(device) -> str:
    """The kind of machine measured defaults are keyed on, for a torch.device: its type off the CPU
    (cuda, mps); cpu-avx512_bf16 (native bf16: AVX-512 BF16 or AMX); cpu-avx2 (AVX2 without native
    bf16); cpu (anything else: another instruction set, or flags that cannot be read)."""
    if device.type != "cpu":
        return device.type
    if native_bf16():
        return "cpu-avx512_bf16"
    return "cpu-avx2" if "avx2" in cpu_flags() else "cpu"


def machine_info(pair) -> dict:
    """The machine a pair runs on, as benchmarks and run records describe it."""
    import torch
    import transformers

    from specdec.models.dtypes import dtype_name

    cpu = cpu_model()
    if pair.device.type == "cuda":
        cpu += f" + {torch.cuda.get_device_name(pair.device)}"
    return {
        "cpu": cpu,
        "cpu_flags": reported_flags(),
        "cores": cores(),
        "torch_threads": torch.get_num_threads(),
        "ram_gb": ram_gb(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": str(pair.device),
        "dtype": dtype_name(pair.target.dtype),
        "draft_dtype": dtype_name(pair.draft.dtype) if pair.draft is not None else None,
    }
