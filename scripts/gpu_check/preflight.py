"""Before the GPU check: is this Python the one the project needs? scripts/gpu_check.sh runs it
(python -m scripts.gpu_check.preflight) once the carried wheels are installed. It prints one line,
and exits 1 when something is wrong, before any minute of the check is spent.

1. Versions. Every package requirements.txt names for this Python that the check imports (the
   app's own, APP_ONLY, are left out), and every package transformers itself requires, must be
   importable in a version the specifier allows; the transformers imported must be the one whose
   metadata was read.
2. The cache is used. transformers 5.24 renamed the forward argument past_key_values to `cache`;
   an older one takes `cache=` into **kwargs and makes a fresh cache for every pass: nothing
   raises, and every pass attends to its own tokens only. So one pass over five tokens of a
   one-layer model, through each cache the engine runs, must grow the eager runner's DynamicCache
   to five positions and write positions 0 to 4 (and no other) of the static runner's StaticKV,
   and the sixth token's logits read through each must be those of the whole sequence in one pass.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys
from pathlib import Path

import torch
from packaging.requirements import Requirement

from scripts.gpu_check.record import guarded

ROOT = Path(__file__).resolve().parents[2]
APP_ONLY = {"gradio", "plotly", "spaces"}  # the page and ZeroGPU's package: nothing the check imports
TOLERANCE = 1e-4  # fp32 logits of one pass against the same through a cache: sums in another order


def pinned(path: Path = ROOT / "requirements.txt") -> list[Requirement]:
    """requirements.txt's requirements for this Python (markers evaluated), the app's own left out."""
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith(("#", "-")):
            req = Requirement(line)
            if (req.marker is None or req.marker.evaluate()) and req.name.lower() not in APP_ONLY:
                found.append(req)
    return found


def unmet(requirements: list[Requirement], wanted_by: str) -> list[str]:
    """What is missing or outside its specifier, one phrase each."""
    problems = []
    for req in requirements:
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an optional extra's
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{req.name} is not installed ({wanted_by} needs {req})")
            continue
        if not req.specifier.contains(have, prereleases=True):
            problems.append(f"{req.name} {have} is installed, {wanted_by} needs {req}")
    return problems


def version_problems() -> list[str]:
    import transformers

    problems = unmet(pinned(), "requirements.txt")
    own = [Requirement(r) for r in metadata.requires("transformers") or []]
    problems += unmet(own, f"transformers {transformers.__version__}")
    if transformers.__version__ != metadata.version("transformers"):
        problems.append(f"transformers {transformers.__version__} is imported from {Path(transformers.__file__).parent}, "
                        f"but the metadata found first says {metadata.version('transformers')}")
    return problems


def cache_problems(device: torch.device) -> tuple[list[str], float | None]:
    """The check of point 2 on `device` -> (problems, the largest logit difference, if measured)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.float32).eval()
    ids = torch.arange(3, 9, device=device)  # (6,)
    with torch.inference_mode():
        whole = model(input_ids=ids[None]).logits[0, -1]  # (V,) the sixth token's logits, no cache given
    problems, differences = [], []
    for name, check in (("eager", eager_cache), ("static", static_cache)):
        result, error = guarded(lambda: check(model, ids))
        problem, logits = result if error is None else (f"a pass through the {name} cache failed ({error})", None)
        if problem is None:
            differences.append(float((logits - whole).abs().max()))
            if not torch.allclose(logits, whole, atol=TOLERANCE, rtol=TOLERANCE):
                problem = f"the {name} cache's next-token logits differ from the whole sequence's by {differences[-1]:.2e}"
        problems += [problem] if problem else []
    return problems, max(differences, default=None)


def eager_cache(model, ids: torch.Tensor) -> tuple[str | None, torch.Tensor | None]:
    """Five tokens into the eager runner's cache, then the sixth -> (a problem, its logits (V,))."""
    from specdec.core.runners.eager_model import CachedModel

    lm = CachedModel(model, 64)
    lm.prefill(ids[:5])
    if lm.length != 5:
        return f"the eager cache holds {lm.length} positions after a pass over 5 tokens (`cache=` ignored?)", None
    return None, lm.forward(ids[5:], last_only=True)[0]


def static_cache(model, ids: torch.Tensor) -> tuple[str | None, torch.Tensor | None]:
    """The same through the static runner's cache, which must have written slots 0 to 4 only."""
    from specdec.core.runners.static_model import StaticModel

    lm = StaticModel(model, 64)
    lm.reserve(6)
    lm.prefill(ids[:5])
    written = (lm.kv.keys[0][0].abs().sum(dim=(0, 2)) > 0).tolist()  # (capacity,) per slot
    if written[:5] != [True] * 5 or any(written[5:]):
        return f"the static cache's written slots are {[i for i, w in enumerate(written) if w][:8]}, not 0 to 4", None
    lm.input(1).copy_(ids[5:])
    return None, lm.run(1, 1, last_only=True)[0]


def main() -> int:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problems, error = guarded(version_problems)
    problems = [f"transformers does not import ({error})"] if error else problems
    worst = None
    if not problems:  # with the wrong versions the cache check would only repeat them
        result, error = guarded(lambda: cache_problems(device))
        problems, worst = result if error is None else ([f"the cache check failed ({error})"], None)
    if problems:
        print(f"gpu_check preflight FAILED on {device.type}: {'; '.join(problems)} (were the wheels of .whl/ installed?)")
        return 1
    import transformers

    print(f"gpu_check preflight: transformers {transformers.__version__} from {Path(transformers.__file__).parent.parent}, "
          f"torch {torch.__version__} on {device.type}; the cache is used: the eager cache grew to 5 positions, the static "
          f"cache wrote slots 0-4, the next token through each matches the whole sequence (max difference {worst:.1e})",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
