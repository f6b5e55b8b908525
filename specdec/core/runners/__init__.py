"""How a run's passes run: the runners (GenerationConfig.runner).

- eager: each pass over a growing cache (eager_model.py): lean_pass.py's pass where it supports the
  model (transformers' ops and bits, less Python), else transformers' decoder over a DynamicCache.
- static: a preallocated cache whose position is a host integer (rollback sets it), every pass in
  one of a few fixed shapes (static_model.py).
- compiled: the static model with its fixed-shape passes captured once per model and process:
  CUDA graphs on a GPU, torch.compile on a CPU (capture.py, which also owns who holds them).

The three differ only in the model they run (a RunModel, below). One Runner (runner.py) runs a
step over any of them: the proposer's draft, the check of K+1 tokens in one target pass,
acceptance on the device, one read to the host. A model is lent to a run (`ModelLender.claim`,
before its prompt) and given back when it ends (`release`): an eager or static run gets a model of
its own, a compiled run the process's captured model of the right size, one run at a time.
A runner runs the attention its model was given where the model was made or moved
(specdec/kernels/attention.py); it sets none of its own.
"""

from __future__ import annotations

import logging
from typing import Protocol

import torch

from specdec.core.config import parse_runner
from specdec.core.runners.capture import compiled_model
from specdec.core.runners.eager_model import EagerModels
from specdec.core.runners.static_model import StaticModels

log = logging.getLogger("specdec.runners")


class RunModel(Protocol):
    """A causal LM with a cache of its own, as a runner runs it."""

    device: torch.device
    features: torch.Tensor | None  # (n, H) the last pass's final hidden states (after the model's final norm)

    @property
    def length(self) -> int: ...  # positions held in the cache

    def forward(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """ids (n,) on the device, after the cached positions -> logits (n, V), or (1, V) if last_only."""

    def prefill(self, ids: torch.Tensor) -> None:
        """The prompt (n,) from position 0, in one pass."""

    def crop(self, length: int) -> None:
        """Keep the first `length` positions."""


class ModelLender(Protocol):
    """Where a run gets the RunModel it runs on (RunParts.target and .draft are lenders)."""

    def claim(self, owner, positions: int, shapes) -> RunModel:
        """A model for `owner`'s run of up to `positions` positions; `shapes`: the fixed-shape passes
        it will make ((tokens, last row only) pairs), captured here if the model is compiled."""

    def release(self, owner) -> None:
        """`owner`'s run is over: what it claimed may serve another run."""


def runner_model(runner: str, module, vocab_size: int, linear=None) -> ModelLender:
    """The lender of `module` as `runner` runs it (`linear`: a context manager entered around every
    pass, rerouting F.linear, or None). A model spread over several devices (device_map="auto") runs
    eager: the static cache lives on one device and a CUDA graph cannot span several (one line says so)."""
    lenders = {"eager": EagerModels, "static": StaticModels, "compiled": compiled_model}
    devices = {p.device for p in module.parameters()}
    if parse_runner(runner) != "eager" and len(devices) > 1:
        log.warning("specdec: the %s runner runs eager for this model: its weights are spread over %s",
                    runner, ", ".join(sorted(str(d) for d in devices)))
        runner = "eager"
    return lenders[runner](module, vocab_size, linear)
