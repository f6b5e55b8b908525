"""The parts of a run: what the decoding loop is handed, already built.

Choosing a target kernel, a draft variant, the way F.linear runs and the runner, and reading or
measuring a cost table, all happen above the core (specdec.engines.assemble). The loop only runs what it gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specdec.core.runners import ModelLender
from specdec.core.runners.runner import Runner

if TYPE_CHECKING:
    from specdec.measure.passcost import PassCosts


@dataclass(frozen=True)
class RunParts:
    target: ModelLender  # the target as it runs (its kernel and runner chosen): lends the run a model with an empty cache
    draft: ModelLender | None  # the draft model as it runs (its variant chosen); None: no draft model drafts
    costs: PassCosts | None  # the cost table the cost K policy reads; None where no cost policy runs
    device: torch.device  # where the run's tensors and its seeded generator live (the pair's device)
    eos_ids: frozenset[int]  # tokens that end the run where they stand
    tokenizer: object  # the pair's tokenizer: decodes the sequence into display text per token
    runner: type[Runner] = Runner  # what runs the steps (runners.recording.RecordingRunner records them for the step panel)
