"""The files Spaces reads agree: README.md's front matter names a Python, and requirements.txt's
markers give that Python a torch ZeroGPU supports (2.8 to 2.11) with `spaces`, while the Python of
this project's machines (3.11) keeps the CPU build on disk, torch 2.13.0."""

from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def requirements(path: Path, python: str) -> dict[str, Requirement]:
    """The requirements `path` installs under Python `python` (following `-r`), by name."""
    env = default_environment() | {"python_version": python, "python_full_version": f"{python}.0"}
    found = {}
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            found |= requirements(path.parent / line[3:].strip(), python)
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            assert req.name not in found or str(found[req.name].specifier) == str(req.specifier), f"{req.name} twice in {path.name}"
            found[req.name] = req
    return found


def pinned(req: Requirement) -> Version:
    (spec,) = req.specifier
    assert spec.operator == "==", req
    return Version(spec.version)


def front_matter_python() -> str:
    front = (ROOT / "README.md").read_text().split("---")[1]
    (line,) = [x for x in front.splitlines() if x.startswith("python_version:")]
    return line.split(":", 1)[1].strip().strip('"')


def test_the_space_gets_a_torch_zerogpu_supports_and_spaces():
    python = front_matter_python()
    assert python in ("3.10", "3.12")  # the Pythons ZeroGPU offers
    space = requirements(ROOT / "requirements.txt", python)
    assert Version("2.8") <= pinned(space["torch"]) < Version("2.12")
    assert pinned(space["spaces"]) == Version("0.51.3")
    assert {"transformers", "gradio", "accelerate", "safetensors"} <= set(space)


def test_these_machines_keep_the_torch_on_disk():
    here = requirements(ROOT / "requirements.txt", "3.11")
    assert pinned(here["torch"]) == Version("2.13.0") and "spaces" not in here
    assert set(requirements(ROOT / "requirements.txt", "3.12")) - set(here) == {"spaces"}  # nothing else differs
    dev = requirements(ROOT / "requirements-dev.txt", "3.11")
    assert pinned(dev["torch"]) == Version("2.13.0") and pinned(dev["spaces"]) == Version("0.51.3")  # the ZeroGPU test's
    assert requirements(ROOT / "requirements-dev.txt", "3.12")["spaces"].specifier == dev["spaces"].specifier
