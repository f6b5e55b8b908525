"""What every proposer is: the Draft it makes, the interface the runner calls (specdec.core.proposers),
and what a proposer may use of the run that calls it (`Run`, which specdec.core.runners.runner.Runner
is): the proposers depend on this module only, never on the runner's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class Draft:
    """A proposal: what a proposer drafted for one step."""

    ids: torch.Tensor  # (K,) drafted token ids on the run's device (K may be 0: nothing drafted)
    q: torch.Tensor | None  # (K, V) the proposer's probabilities at each drafted position; None: deterministic (one-hot on ids)
    drafter: str  # who drafted: a proposer's name ("model", "lookup"), "" when nothing was drafted
    counted: torch.Tensor | None = None  # 0-d on the device: how many of the K count (an early stop decided there); None: all K
    withdrawn_why: str = ""  # the drafter left out a draft it was unsure of (after the K ids): why, for the step's event


class Run(Protocol):
    """What a proposer sees of the run that calls it (the Runner)."""

    device: torch.device
    tokens: torch.Tensor  # (capacity,) the sequence so far, on the device
    target: object  # the target's RunModel; after a check, `target.features` holds the target's rows of it

    def claim(self, lender, positions: int, shapes):
        """A model of `lender` (a RunModel's maker) claimed for this run, for up to `positions` positions."""

    def send(self, ids: list[int]) -> torch.Tensor:
        """Token ids found on the host -> (n,) on the device, without waiting."""


class Proposer(Protocol):
    name: str  # StepEvent.drafter of the steps it drafts

    def has_draft(self, seq: list[int]) -> bool:
        """Whether it has something to propose after `seq` (the sequence so far, on the host)."""

    def unseen(self, seq: list[int]) -> int:
        """How many tokens its first pass of a step would feed: 1 when it keeps up with every step,
        more for a draft model that catches up after steps it did not draft (the cost policy prices it)."""

    def start(self, run: Run, prompt_length: int, positions: int) -> None:
        """The target has read the prompt but its last token: take what the run needs (a model,
        claimed from run.claim for up to `positions` positions) and read the prompt too."""

    def ready(self, run: Run) -> None:
        """It is about to draft: read what it left unread at the start (the draft model: the prompt,
        read only if it drafts at all). The run's clock leaves this out, as it leaves out the target's
        reading of the prompt."""

    def propose(self, run: Run, seq: list[int], k: int) -> Draft:
        """Up to k >= 1 tokens to follow `seq` (run.tokens holds the same on the device)."""

    def settle(self, run: Run, kept_from: int, accepted: int, length: int) -> None:
        """The target checked a draft placed at `kept_from`, kept `accepted` of it, and the sequence
        is now `length` long (run.tokens[:length]); run.target.features holds the check's rows."""

    def close(self, run: Run) -> None:
        """The run is over: give back what was claimed."""


def nothing(device: torch.device) -> Draft:
    """The draft of a step that drafts nothing (plain decoding, or lookup without a match)."""
    return Draft(torch.empty(0, dtype=torch.long, device=device), None, "")
