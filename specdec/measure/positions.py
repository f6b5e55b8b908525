"""Acceptance by draft position and the distribution of accepted lengths, per drafter.

Position k of a step's draft is *tested* when the step drafted at least k tokens and the target
kept positions 1..k-1: a draft is checked left to right and the first rejection ends the step, so
the tokens after it were never judged. Acceptance at position k is accepted / tested there, the
definition of vLLM's per-request speculative-decoding metrics and of llama.cpp's draft statistics.
Unlike accepted / drafted, it does not count unjudged tokens as rejected, and it shows how fast a
drafter's guesses decay with depth (a head trained on the target's features is judged by this).

Steps that drafted nothing (plain steps, K = 0) count nowhere. Every figure is keyed by the
event's `drafter`, whatever its name, so a new drafter needs nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from specdec.core.events import StepEvent

UNNAMED = "drafter"  # the key of drafting steps whose event names no drafter


@dataclass(frozen=True)
class PositionAcceptance:
    """One drafter's steps, counted by draft position. Index i of each tuple is position i + 1."""

    drafter: str  # StepEvent.drafter of the steps counted (UNNAMED when the events leave it empty)
    steps: int  # steps that drafted at least one token
    tested: tuple[int, ...]  # steps where position k was judged: drafted >= k and accepted >= k - 1
    accepted: tuple[int, ...]  # steps where position k was kept: accepted >= k
    lengths: tuple[int, ...]  # lengths[n]: steps that kept exactly n drafts, n = 0 .. the longest draft

    @property
    def rates(self) -> tuple[float | None, ...]:
        """accepted / tested at each position (None where nothing was tested there)."""
        return tuple(a / t if t else None for a, t in zip(self.accepted, self.tested))

    @property
    def length_shares(self) -> tuple[float, ...]:
        """lengths as a share of the drafter's drafting steps (they add up to 1)."""
        return tuple(n / self.steps for n in self.lengths)

    def as_dict(self) -> dict:
        return {"drafter": self.drafter, "steps": self.steps, "tested": list(self.tested),
                "accepted": list(self.accepted), "rates": list(self.rates), "lengths": list(self.lengths)}


def position_acceptance(events: Iterable[StepEvent], drafter: str = UNNAMED) -> PositionAcceptance:
    """Count every drafting step of `events` together, whoever drafted it."""
    return steps_counted(((e.n_drafted, e.accepted) for e in events), drafter)


def steps_counted(steps: Iterable[tuple[int, int]], drafter: str = UNNAMED) -> PositionAcceptance:
    """Count steps given as (drafted, accepted) pairs: a run's events, or a drafting walk that
    replays held-out text (specdec.train.evaluate.walk), counted the one way."""
    drafting = [(n, kept) for n, kept in steps if n]  # steps that drafted nothing count nowhere
    longest = max((n for n, _ in drafting), default=0)
    tested, accepted, lengths = [0] * longest, [0] * longest, [0] * (longest + 1 if drafting else 0)
    for n, kept in drafting:
        for position in range(1, n + 1):
            if kept >= position - 1:
                tested[position - 1] += 1
            if kept >= position:
                accepted[position - 1] += 1
        lengths[kept] += 1
    return PositionAcceptance(drafter, len(drafting), tuple(tested), tuple(accepted), tuple(lengths))


def by_drafter(events: Iterable[StepEvent]) -> dict[str, PositionAcceptance]:
    """drafter name -> its figures, in the order the drafters first drafted in the run."""
    groups: dict[str, list[StepEvent]] = {}
    for e in events:
        if e.n_drafted:
            groups.setdefault(e.drafter or UNNAMED, []).append(e)
    return {name: position_acceptance(steps, name) for name, steps in groups.items()}
