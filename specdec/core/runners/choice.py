"""The one place that goes from a runner's name (GenerationConfig.runner) to what runs it."""

from __future__ import annotations

from specdec.core.cached_model import CachedModel
from specdec.core.config import RUNNERS
from specdec.core.runners.capture import CompiledModels, compiled_model
from specdec.core.runners.eager import EagerRunner
from specdec.core.runners.static_model import StaticModel
from specdec.core.runners.static_runner import StaticRunner


def runner_model(runner: str, module, vocab_size: int, linear=None) -> CachedModel | StaticModel | CompiledModels:
    """The model as this runner runs it: eager, a fresh growing cache; static, a fresh fixed-shape
    model (its cache allocated when a run claims it); compiled, the process's captured models of
    this module (one per cache size, each lent to one run at a time). A run claims it before its
    prompt (`claim`), which gives the model it runs on."""
    if runner == "eager":
        return CachedModel(module, vocab_size, linear=linear)
    if runner == "static":
        return StaticModel(module, vocab_size, linear)
    if runner == "compiled":
        return compiled_model(module, vocab_size, linear)
    raise ValueError(f"runner must be one of {', '.join(RUNNERS)}, got {runner!r}")


def runner_class(runner: str) -> type[EagerRunner] | type[StaticRunner]:
    """The class that runs a run's steps over runner_model's models."""
    return EagerRunner if runner == "eager" else StaticRunner
