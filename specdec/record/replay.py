"""The replay clock: both runs of a record on one clock, as the hardware ran them.

Each run's events carry `elapsed_s`, the seconds since that run started. A replay starts both
runs at replay time 0 and shows, at replay time t, every event of each run whose elapsed_s is at
most t: the race on screen is the race the machine ran, only slowed down or sped up.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

from specdec.core.events import StepEvent

SPEEDS = (0.25, 0.5, 1.0, 2.0)  # replay speed, as a multiple of real time


@dataclass(frozen=True)
class Position:
    t: float  # replay time, seconds since both runs started
    spec: int  # events of the speculative run shown
    plain: int  # events of the plain run shown


def shown(events: Sequence[StepEvent], t: float) -> int:
    """How many events have elapsed by time t (events are in time order)."""
    return bisect.bisect_right([e.elapsed_s for e in events], t)


def duration(spec: Sequence[StepEvent], plain: Sequence[StepEvent]) -> float:
    """Replay time at which both runs have finished."""
    return max([run[-1].elapsed_s for run in (spec, plain) if run], default=0.0)


def at_time(spec: Sequence[StepEvent], plain: Sequence[StepEvent], t: float) -> Position:
    return Position(t, shown(spec, t), shown(plain, t))


def at_step(spec: Sequence[StepEvent], plain: Sequence[StepEvent], n: int) -> Position:
    """Scrub to step n of the speculative run: exactly n of its steps, and the plain run as it was then."""
    n = max(0, min(n, len(spec)))
    t = spec[n - 1].elapsed_s if n else 0.0
    return Position(t, n, shown(plain, t))


def next_change(spec: Sequence[StepEvent], plain: Sequence[StepEvent], t: float) -> float | None:
    """The replay time of the next event of either run after t; None when nothing is left."""
    upcoming = [run[i].elapsed_s for run in (spec, plain) if (i := shown(run, t)) < len(run)]
    return min(upcoming, default=None)


@dataclass(frozen=True)
class Clock:
    """Replay time from wall time: t = t0 + (wall - wall0) x speed. Immutable: a new speed gives a
    new clock anchored at the current moment, so changing speed mid-replay never jumps, and a
    reader in another thread sees the old clock or the new one, never half of each."""

    t0: float  # replay time at wall0
    wall0: float  # a time.monotonic() reading
    speed: float = 1.0

    def __post_init__(self):
        if self.speed not in SPEEDS:
            raise ValueError(f"replay speed must be one of {', '.join(f'{s:g}x' for s in SPEEDS)}, got {self.speed!r}")

    def at(self, wall: float) -> float:
        return self.t0 + (wall - self.wall0) * self.speed

    def wall_of(self, t: float) -> float:
        """The wall time at which the clock reaches replay time t."""
        return self.wall0 + (t - self.t0) / self.speed

    def with_speed(self, wall: float, speed: float) -> "Clock":
        return Clock(self.at(wall), wall, speed)
