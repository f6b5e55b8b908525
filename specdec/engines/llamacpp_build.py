"""Build llama.cpp's `llama-server` once, from the llama.cpp sources vendored in the
llama-cpp-python sdist on PyPI (llama.cpp and llama-cpp-python are both MIT licensed), and cache
the binary with llama.cpp's LICENSE beside it.

GGML_NATIVE compiles for the CPU it runs on (AVX2, AVX-512, ...), so the cache folder is keyed on
the CPU's feature flags and the build's cmake flags: a build for one kind of machine, or made with
other flags, is never reused. An interrupted build resumes where it stopped (cmake keeps its build
tree until the binary is in place).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from tqdm.auto import tqdm

from specdec.models import machine
from specdec.models.bundle import cache_root
from specdec.engines.base import EngineError

SDIST = "llama-cpp-python"  # the PyPI package whose sdist carries llama.cpp's sources in vendor/llama.cpp
SDIST_VERSION = "0.3.36"
VENDORED = "vendor/llama.cpp/"  # inside the sdist, under its top folder
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",  # no web page inside the server: only its HTTP API is used
    "-DLLAMA_OPENSSL=OFF",  # plain HTTP on localhost
    "-DGGML_NATIVE=ON",  # this CPU's instructions: hence the cache key below
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary to keep; the build tree is removed afterwards
)
# GGML_NATIVE compiles ggml's AMX path in on a CPU with AMX (Intel Sapphire Rapids and later). On such a
# machine here that path crashed llama-server at its first matrix product (SIGSEGV at `ldtilecfg` in
# ggml_backend_amx_mul_mat), although AMX instructions ran there outside ggml; without it ggml uses its
# AVX-512 kernels, as on a CPU without AMX. Compiler flags, so only where x86 compilers know them.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
JOBS = 2  # compile jobs: the machines this project runs on have 2 cores
OWN_BINARY = "SPECDEC_LLAMA_SERVER"  # environment variable: a llama-server built elsewhere, used instead of building one
MARKER = "complete.json"  # written last: a folder without it holds an unfinished build
PERCENT = re.compile(r"^\[\s*(\d+)%\]")  # cmake's Makefile generator prefixes each step with its progress


class BuildUnavailable(EngineError):
    """This machine cannot build llama-server (no cmake, no C++ compiler): tests skip on this."""


def cmake_flags() -> tuple[str, ...]:
    """The cmake flags of a build on this machine."""
    if platform.machine() in ("x86_64", "AMD64"):
        return CMAKE_FLAGS + (f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}")
    return CMAKE_FLAGS


def build_key() -> str:
    """A short hash of this CPU's architecture and feature flags (what GGML_NATIVE builds for) and of
    the cmake flags."""
    flags = machine.cpu_flags() if machine.cpuinfo() is not None else platform.processor().split()
    text = platform.machine() + " " + " ".join(sorted(flags)) + " | " + " ".join(cmake_flags())
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def build_folder() -> Path:
    return cache_root() / "engines" / f"llama.cpp-{SDIST_VERSION}-{build_key()}"


def server_binary() -> Path:
    """Where the built llama-server is (it may not be there yet: see is_built, build)."""
    return build_folder() / "bin" / "llama-server"


def own_binary() -> Path | None:
    """$SPECDEC_LLAMA_SERVER, when set: a llama-server the user built or installed (checked to exist)."""
    path = os.environ.get(OWN_BINARY)
    if not path:
        return None
    if not Path(path).is_file():
        raise ValueError(f"{OWN_BINARY}={path!r} is not a file: point it at a llama-server binary, or unset it to build one")
    return Path(path)


def is_built() -> bool:
    if own_binary() is not None:
        return True
    folder = build_folder()
    return (folder / MARKER).is_file() and (folder / "bin" / "llama-server").is_file()


def missing_tools() -> list[str]:
    """What a build needs and this machine lacks."""
    missing = [] if shutil.which("cmake") else ["cmake"]
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler (g++ or clang++)")
    return missing


def build(quiet: bool = False) -> Path:
    """Build llama-server unless it is cached; return its path. 4 to 8 minutes on 2 cores."""
    if own_binary() is not None:
        return own_binary()
    if is_built():
        return server_binary()
    missing = missing_tools()
    if missing:
        raise BuildUnavailable(f"cannot build llama-server: {' and '.join(missing)} not found (e.g. apt-get install cmake g++)")
    folder = build_folder()
    folder.mkdir(parents=True, exist_ok=True)
    source = _sources(folder / "src", quiet)
    build_dir = folder / "build"
    log_path = folder / "build.log"
    with open(log_path, "a") as log:
        _run(["cmake", "-S", str(source), "-B", str(build_dir), *cmake_flags()], log, log_path, "configuring")
        _compile(build_dir, log, log_path, quiet)
    built = build_dir / "bin" / "llama-server"
    if not built.is_file():
        raise EngineError(f"the llama-server build finished without {built}; see log {log_path}")
    (folder / "bin").mkdir(exist_ok=True)
    shutil.copy2(built, folder / "bin" / "llama-server")
    shutil.copy2(source / "LICENSE", folder / "LICENSE")  # llama.cpp's MIT licence travels with its binary
    (folder / MARKER).write_text(json.dumps({
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source": f"{SDIST}=={SDIST_VERSION} ({VENDORED})",
        "cmake_flags": list(cmake_flags()), "build_key": build_key(), "machine": platform.machine(),
    }, indent=1))
    shutil.rmtree(build_dir, ignore_errors=True)  # hundreds of MB of objects, not needed once the binary is kept
    shutil.rmtree(folder / "src", ignore_errors=True)
    return folder / "bin" / "llama-server"


def _sources(src: Path, quiet: bool) -> Path:
    """llama.cpp's source tree from the sdist, downloaded and unpacked once into `src`."""
    tree = src / "llama.cpp"
    if (tree / "CMakeLists.txt").is_file():
        return tree
    src.mkdir(parents=True, exist_ok=True)
    archive = src / f"{SDIST.replace('-', '_')}-{SDIST_VERSION}.tar.gz"
    if not archive.is_file():
        if not quiet:
            print(f"Downloading the {SDIST} {SDIST_VERSION} sdist (llama.cpp's sources, about 75 MB) ...", file=sys.stderr)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                               f"{SDIST}=={SDIST_VERSION}", "-d", str(src)], capture_output=True, text=True)
        if done.returncode != 0 or not archive.is_file():
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise EngineError(f"pip could not download the {SDIST}=={SDIST_VERSION} sdist: {last[0]}")
    partial = src / "llama.cpp.partial"
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(archive) as tar:
        top = f"{SDIST.replace('-', '_')}-{SDIST_VERSION}/{VENDORED}"
        members = []
        for member in tar.getmembers():
            if member.name.startswith(top):
                member.name = member.name[len(top):]
                members.append(member)
        tar.extractall(partial, members=members, filter="data")
    partial.rename(tree)
    archive.unlink()
    return tree


def _run(argv: list[str], log, log_path: Path, what: str) -> None:
    log.write("$ " + " ".join(argv) + "\n")
    log.flush()
    code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise EngineError(f"llama-server build failed while {what} (exit code {code}); see log {log_path}")


def _compile(build_dir: Path, log, log_path: Path, quiet: bool) -> None:
    argv = ["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", str(JOBS)]
    log.write("$ " + " ".join(argv) + "\n")
    log.flush()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    with tqdm(total=100, unit="%", desc="Building llama-server", disable=quiet) as bar:
        for line in process.stdout:
            log.write(line)
            match = PERCENT.match(line)
            if match and int(match.group(1)) > bar.n:
                bar.update(int(match.group(1)) - bar.n)
    code = process.wait()
    if code != 0:
        raise EngineError(f"llama-server build failed while compiling (exit code {code}); see log {log_path}")
