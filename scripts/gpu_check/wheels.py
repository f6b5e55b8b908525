"""Wheels for the GPU machine's Python, downloaded here: `python -m scripts.gpu_check.wheels`.

The GPU machine lent to this project runs its own Python 3.12 with no network: `.venv` does not
travel, and nothing can be installed there but what travels with the working tree (64 MiB in
all). Its image (read 2026-11, /work/.library/device/KINDS.md) has torch 2.11.0, which
requirements.txt pins for Python 3.12, and the rest the check needs, except:
- transformers 5.17.0, older than requirements.txt's >=5.24: 5.24 renamed the forward argument
  past_key_values to `cache`, and on 5.17 the engine's caches are silently ignored;
- no gguf (the q4k target kernel and the offline bundle read GGUF files).
So those two travel as wheels (pure Python, any platform), each in the version installed here,
the one this project's tests pass with, into .whl/ (git-ignored). scripts/gpu_check.sh installs
them there with `pip install --no-index --no-deps --target` into a folder put first on
PYTHONPATH, and its preflight says in one line if any version is still wrong. The app's own
packages (gradio, plotly, spaces) stay behind: the check never imports them.

This prints what travels: the tracked and untracked files git does not ignore, and .whl/.
"""

from __future__ import annotations

import importlib.metadata as metadata
import subprocess
import sys

from scripts.gpu_check.preflight import ROOT, pinned

CARRIED = ("transformers", "gguf")  # what the image lacks or has older (see above)
FOLDER = ROOT / ".whl"
LIMIT_MIB = 64  # what travels to the device machine, at most


def wanted() -> list[str]:
    """name==version for each carried package, the version installed here; SystemExit naming the
    package when that version is not one requirements.txt allows."""
    pins = {req.name.lower(): req for req in pinned()}
    found = []
    for name in CARRIED:
        have = metadata.version(name)
        if name in pins and not pins[name].specifier.contains(have):
            raise SystemExit(f"{name} {have} is installed here, requirements.txt needs {pins[name]}: install that first")
        found.append(f"{name}=={have}")
    return found


def download(specs: list[str]) -> None:
    FOLDER.mkdir(exist_ok=True)
    for old in FOLDER.glob("*.whl"):  # one version of each: two would stop the install there
        old.unlink()
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--dest", str(FOLDER), *specs], check=True)


def travelling_bytes() -> int:
    """The working tree that travels (tracked and untracked files git does not ignore) plus .whl/."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    tree = sum((ROOT / name.decode()).stat().st_size for name in listed if name and (ROOT / name.decode()).is_file())
    return tree + sum(p.stat().st_size for p in FOLDER.glob("*"))


def main() -> int:
    specs = wanted()
    download(specs)
    for wheel in sorted(FOLDER.glob("*.whl")):
        print(f"{wheel.relative_to(ROOT)}  {wheel.stat().st_size / 2**20:.1f} MiB")
    total = travelling_bytes() / 2**20
    print(f"what travels (the working tree and .whl/): {total:.1f} MiB of {LIMIT_MIB}")
    return 0 if total < LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
