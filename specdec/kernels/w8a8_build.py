"""The W8A8 kernel's library (specdec/kernels/csrc/: w8a8.cpp; w4a8.cpp, the W4A8 kernel, which shares
its activation quantization, activation_blocks.h, and its entry's path choice and checks, kernel_entry.h;
and attention_rows.cpp, the batch-invariant attention
of a w8a8 or w4a8 target): built once with the system's C++ compiler against torch's own headers and
libraries, cached, loaded as the torch ops `torch.ops.specdec.w8a8_linear`, `torch.ops.specdec.w8a8_paths`,
`torch.ops.specdec.w4a8_linear`, `torch.ops.specdec.w4a8_paths` and `torch.ops.specdec.attention_rows`; and
whether this machine can run it (one answer for both kernels: `unavailable_for` words it for either).

The cache folder is `<cache>/kernels/w8a8-<key>/`, the key a hash of the sources, torch's version, the
compiler's version and the flags, so any change there builds anew and nothing else ever does. The
library is written into a temporary folder that is renamed into place when complete: an interrupted
build never looks complete. A failed build leaves its log in `w8a8-<key>.failed/`, and the kernel is
then reported unavailable (with the log's path) instead of being compiled again on every start.

The source needs AVX2 and picks its AVX-512 VNNI and AMX-INT8 paths at run time (AMX only where the
compiler has its intrinsics, GCC 11 or Clang 12 and later), so one build serves every x86 CPU
(no -march=native). It is compiled with -fopenmp so that torch's `at::parallel_for` (an OpenMP region
in torch's headers) runs on torch's own thread team: the library links the `libgomp.so.1` that torch
has already loaded, never a second OpenMP runtime (specdec/serving/torch_thread.py says why teams matter).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from specdec.models import machine
from specdec.models.bundle import cache_root

_CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = tuple(_CSRC / name for name in ("w8a8.cpp", "w4a8.cpp", "attention_rows.cpp", "linear_rows.cpp"))
HEADERS = (_CSRC / "activation_blocks.h", _CSRC / "amx_tiles.h", _CSRC / "kernel_entry.h", _CSRC / "weight_stream.h")  # included by the sources: part of the key, not of the command
LIBRARY = "libspecdec_w8a8.so"
# -ffp-contract=off: no fused multiply-add in the float epilogue, so both paths round alike.
FLAGS = ("-O3", "-std=c++20", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=off", "-fno-fast-math", "-DNDEBUG", "-w")
COMPILER_ENV = "CXX"  # environment variable naming the compiler; else g++, then c++
NAME = "the w8a8 target kernel"
PATHS = {"auto": 0, "avx2": 1, "avx512": 2, "amx": 3}  # the kernels' instruction-set paths (auto: the best this CPU has for the call; csrc/kernel_entry.h)

_lock = threading.Lock()
_loaded: list[Path] = []  # the library loaded into this process (at most one)


def path_from(env: str) -> int:
    """The path the environment variable `env` asks a kernel of this library to run (auto when unset);
    ValueError naming the variable when it names no path."""
    name = os.environ.get(env, "auto").strip().lower() or "auto"
    if name not in PATHS:
        raise ValueError(f"{env} must be one of {', '.join(PATHS)}, got {name!r}")
    return PATHS[name]


def compiler() -> str | None:
    """The C++ compiler to build with: $CXX, else g++, else c++ (None when there is none)."""
    wanted = os.environ.get(COMPILER_ENV)
    if wanted:
        return shutil.which(wanted)
    return shutil.which("g++") or shutil.which("c++")


@functools.cache
def compiler_version(cxx: str) -> str:
    try:
        done = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (done.stdout.splitlines() or ["unknown"])[0]


def _torch_paths() -> tuple[list[str], list[str]]:
    from torch.utils.cpp_extension import include_paths, library_paths

    return include_paths(), library_paths()


def _torch_header() -> Path:
    import torch

    return Path(torch.__file__).parent / "include" / "torch" / "library.h"


def build_key(cxx: str) -> str:
    """A short hash of everything the built library depends on."""
    import torch

    text = "\n".join([*(source.read_text() for source in (*SOURCES, *HEADERS)), torch.__version__, compiler_version(cxx), " ".join(FLAGS), platform.machine()])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_folder(cxx: str) -> Path:
    return cache_root() / "kernels" / f"w8a8-{build_key(cxx)}"


def failed_folder(cxx: str) -> Path:
    return build_folder(cxx).with_name(build_folder(cxx).name + ".failed")


def unavailable_reason(device=None) -> str | None:
    """Why this machine cannot run the kernel (one line), or None when it can (built, or buildable)."""
    if device is not None and getattr(device, "type", str(device)) != "cpu":
        return f"{NAME} is not available on {device}: it runs on a CPU only"
    if platform.machine() not in ("x86_64", "AMD64") or "avx2" not in machine.cpu_flags():
        return f"{NAME} is not available here: it needs an x86 CPU with AVX2, and this one ({machine.cpu_model()}) has none"
    cxx = compiler()
    if cxx is None:
        return f"{NAME} is not available here: it is built once with a C++ compiler, and none was found (install g++)"
    if not _torch_header().is_file():
        return f"{NAME} is not available here: torch's C++ headers are not installed"
    if (failed_folder(cxx) / "build.log").is_file() and not (build_folder(cxx) / LIBRARY).is_file():
        return f"{NAME} is not available here: its build failed (log: {failed_folder(cxx) / 'build.log'})"
    return None


def unavailable_for(kernel: str, device=None) -> str | None:
    """unavailable_reason worded for `kernel` ("w8a8" or "w4a8": both run on this library)."""
    reason = unavailable_reason(device)
    return None if reason is None else reason.replace(NAME, f"the {kernel} target kernel", 1)


def require_for(kernel: str, device=None) -> None:
    """ValueError with the one-line reason, worded for `kernel`, where the library cannot run."""
    reason = unavailable_for(kernel, device)
    if reason is not None:
        raise ValueError(reason)


def available(device=None) -> tuple[bool, str]:
    """(True, "") where the kernel can run (on `device`, a CPU by default), else (False, why)."""
    reason = unavailable_reason(device)
    return reason is None, reason or ""


def require(device=None) -> None:
    """ValueError with the one-line reason where the kernel cannot run."""
    reason = unavailable_reason(device)
    if reason is not None:
        raise ValueError(reason)


def load(progress: bool = True) -> Path:
    """The library loaded into this process: from the cache, or built first (tens of seconds, once).
    ValueError with the one-line reason where it cannot be."""
    with _lock:
        if _loaded:
            return _loaded[0]
        require()
        path = build_folder(compiler()) / LIBRARY
        if not path.is_file():
            build(progress)
        import torch

        torch.ops.load_library(str(path))
        # The op's output for torch.compile's tracing, which runs on tensors without data: the input's
        # shape with n columns, in the input's dtype. Without it a compiled runner cannot capture a pass.
        torch.library.register_fake("specdec::w8a8_linear")(
            lambda x, packed, w_scale, bias, n, path=0: x.new_empty((*x.shape[:-1], n)))
        torch.library.register_fake("specdec::w4a8_linear")(lambda x, packed, bias, n, path=0: x.new_empty((*x.shape[:-1], n)))
        torch.library.register_fake("specdec::attention_rows")(  # (B, H, L, D) queries -> (B, L, H, D)
            lambda q, k, v, mask, scale, path=0: q.new_empty((q.shape[0], q.shape[2], q.shape[1], q.shape[3])))
        torch.library.register_fake("specdec::linear_rows")(lambda x, w, bias: x.new_empty((*x.shape[:-1], w.shape[0])))
        _loaded.append(path)
        return path


def build(progress: bool = True) -> Path:
    """Compile the library into the cache (a no-op when it is there); ValueError when the build fails."""
    cxx = compiler()
    folder = build_folder(cxx)
    if (folder / LIBRARY).is_file():
        return folder / LIBRARY
    folder.parent.mkdir(parents=True, exist_ok=True)
    includes, libraries = _torch_paths()
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}.", dir=folder.parent, ignore_cleanup_errors=True) as tmp:
        argv = [cxx, *FLAGS, *(f for p in includes for f in ("-isystem", p)), *map(str, SOURCES), "-o", str(Path(tmp) / LIBRARY),
                *(f"-L{p}" for p in libraries), "-lc10", "-ltorch_cpu", *(f"-Wl,-rpath,{p}" for p in libraries)]
        code, log = _compile(argv, progress)
        if code != 0:
            failed = failed_folder(cxx)
            failed.mkdir(parents=True, exist_ok=True)
            (failed / "build.log").write_text("$ " + " ".join(argv) + "\n" + log)
            raise ValueError(f"{NAME} is not available here: its build failed (log: {failed / 'build.log'})")
        (Path(tmp) / "command.txt").write_text(" ".join(argv) + "\n")
        try:
            os.rename(tmp, folder)  # complete: into place in one step
        except OSError:  # another process put its build there first: keep that one
            pass
    shutil.rmtree(failed_folder(cxx), ignore_errors=True)
    return folder / LIBRARY


def _compile(argv: list[str], progress: bool) -> tuple[int, str]:
    """Run the compiler, showing the seconds spent on one line; (exit code, its output)."""
    from tqdm.auto import tqdm

    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
    reader.start()
    with tqdm(desc="Building the w8a8 kernel (once, about 30 s)", bar_format="{desc}: {elapsed}", disable=not progress or None) as bar:
        while process.poll() is None:
            time.sleep(0.5)
            bar.refresh()
    reader.join()
    return process.returncode, "".join(output)


def paths(kernel: str = "w8a8") -> list[str]:
    """The instruction-set paths this CPU runs `kernel` (w8a8 or w4a8) on: 'avx2', 'avx512' (VNNI) where it
    has it, and 'amx' (AMX-INT8) where the CPU and the OS give it."""
    import torch

    load()
    bits = int(torch.ops.specdec.w4a8_paths() if kernel == "w4a8" else torch.ops.specdec.w8a8_paths())
    return [name for bit, name in ((1, "avx2"), (2, "avx512"), (4, "amx")) if bits & bit]
