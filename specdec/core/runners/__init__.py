"""How a run's passes run: the runners (GenerationConfig.runner).

- eager: transformers as it is, over a growing DynamicCache (specdec.core.cached_model): the
  shapes vary, the host reads what it needs when it needs it (runners/eager.py).
- static: a preallocated cache whose position is a host integer (rollback sets it), every pass in
  one of a few fixed shapes (shapes.py), acceptance on the device, and one read from the device
  per step (static_model.py, static_draft.py, static_runner.py).
- compiled: the static runner whose fixed-shape passes are captured once per model and process:
  CUDA graphs on a GPU, torch.compile on a CPU (capture.py).

The loop (specdec.core.decoding) sees one interface, Runner below; whoever builds a run's parts
(specdec.engines.assemble) chooses the runner once, with choice.py.
"""

from __future__ import annotations

from typing import Protocol

from specdec.core.runners.reading import Checked


class Runner(Protocol):
    """A run's tensor side: both models and their caches, the acceptance rule, the step's one read.
    Made per run from its RunParts (RunParts.runner is the class), the run's settings, its seeded
    generator and the loop's verify hook (the eager runner calls it; the static one decides on the
    device and has none: `looks_on` says which)."""

    looks_on: bool  # the loop's verify hook sees every step (the step panel records through it)
    capture_s: float  # seconds this run spent capturing passes (compiled runner); 0 otherwise
    target: object  # the target as run (CachedModel or StaticModel: length, forward, crop)
    draft: object | None  # the draft model as run, or None

    def prefill(self, seq: list[int], room: int) -> None:
        """Feed the prompt (`seq`) but its last token; `room`: new tokens the run may add."""

    def check(self, seq: list[int], k: int, lookup: list[int]) -> Checked:
        """Draft up to k tokens (prompt lookup's ids when given), check them in one target pass,
        apply the acceptance rule, read what the event needs in one transfer."""

    def keep(self, length_before: int, accepted: int, length: int) -> None:
        """The loop kept `accepted` drafts and the sequence is now `length` long: roll back to it."""

    def close(self) -> None:
        """The run is over (or abandoned): give back what it held."""
