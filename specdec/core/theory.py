"""Leviathan et al. 2023's model of speculative decoding, and what separates it from a measurement.

The model: each draft token is accepted independently with probability a (alpha), a draft pass
costs c decode steps, and a target pass over K+1 tokens costs `verify_cost` decode steps (1 in the
paper, where decoding is memory-bound). Pure functions of numbers; specdec.measure.metrics feeds them from
events, the app draws them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


def expected_tokens_per_pass(a: float, k: float) -> float:
    """Leviathan et al. 2023: expected tokens per target pass = (1 - a^(K+1)) / (1 - a)."""
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def predicted_speedup(a: float, k: float, c: float, verify_cost: float = 1.0) -> float:
    """Expected speedup over plain decoding: (1 - a^(K+1)) / ((1 - a)(K c + verify_cost)).
    With verify_cost = 1 this is Leviathan et al.'s formula."""
    return expected_tokens_per_pass(a, k) / (k * c + verify_cost)


def tokens_per_pass_distribution(a: float, k: int) -> list[float]:
    """P(a pass emits n tokens) for n = 1..K+1 when each draft is kept independently with
    probability a: n - 1 drafts kept, then a rejection (a^(n-1)(1 - a)), or all K kept (a^K)."""
    if k <= 0:
        return [1.0]
    return [a ** (n - 1) * (1.0 - a) for n in range(1, k + 1)] + [a**k]


def expected_pass_counts(a: float, drafted_per_step: Sequence[int]) -> list[float]:
    """How many passes should emit 1, 2, ... tokens, summed over the run's own steps (each step
    with the draft length it had): index n-1 holds the expected count of n-token passes."""
    longest = max(drafted_per_step, default=0)
    counts = [0.0] * (longest + 1)
    for k in drafted_per_step:
        for i, p in enumerate(tokens_per_pass_distribution(a, k)):
            counts[i] += p
    return counts


def speedup_curve(a: float, c: float, verify_cost_at: Callable[[int], float], ks: Sequence[int]) -> list[float]:
    """Predicted speedup for each K, with the verify cost of a (K+1)-token pass given per K."""
    return [predicted_speedup(a, k, c, verify_cost_at(k)) for k in ks]


def best_k(ks: Sequence[int], speedups: Sequence[float]) -> int:
    return max(zip(speedups, ks), key=lambda pair: (pair[0], -pair[1]))[1]  # the smaller K on a tie


def iso_speedup_grid(k: int, verify_cost: float, alphas: Sequence[float], cs: Sequence[float]) -> list[list[float]]:
    """Predicted speedup over an (alpha, c) grid for one K and verify cost: rows follow cs, columns alphas."""
    return [[predicted_speedup(a, k, c, verify_cost) for a in alphas] for c in cs]


@dataclass(frozen=True)
class PredictionGap:
    """The measured speedup beside the three predictions, and the factors between them.

    textbook x verify_factor = with_verify_cost;  with_verify_cost x burst_factor = from_passes
    (exactly when every step drafted; one-token steps of prompt lookup blur it a little);
    from_passes x unexplained = measured.
    """

    measured: float
    textbook: float  # alpha, K, c; a K+1-token pass costs one decode step
    with_verify_cost: float  # the same, with the measured cost of that pass
    from_passes: float  # measured tokens per pass x decode step / measured time of a step
    verify_factor: float  # (K c + 1) / (K c + verify_cost): < 1 where checking K+1 tokens costs more than a decode step
    burst_factor: float  # measured / expected tokens per pass: > 1 where acceptance comes in bursts
    unexplained: float  # measured / from_passes: time outside the passes, and noise

    @property
    def closest(self) -> str:
        """Which prediction lies nearest the measurement (by ratio)."""
        named = {"textbook": self.textbook, "with_verify_cost": self.with_verify_cost, "from_passes": self.from_passes}
        return min(named, key=lambda name: abs(math.log(self.measured / named[name])) if named[name] > 0 else math.inf)

    def ratio(self, name: str) -> float:
        """measured / prediction."""
        value = getattr(self, name)
        return self.measured / value if value else math.inf


def prediction_gap(measured: float, metrics) -> PredictionGap | None:
    """From a RunMetrics with a known decode step; None when a prediction is missing."""
    m = metrics
    if None in (m.predicted_speedup, m.predicted_speedup_with_verify_cost, m.predicted_speedup_from_passes) or not measured:
        return None
    return PredictionGap(
        measured=measured,
        textbook=m.predicted_speedup,
        with_verify_cost=m.predicted_speedup_with_verify_cost,
        from_passes=m.predicted_speedup_from_passes,
        verify_factor=m.predicted_speedup_with_verify_cost / m.predicted_speedup,
        burst_factor=m.tokens_per_pass / m.expected_tokens_per_pass if m.expected_tokens_per_pass else 1.0,
        unexplained=measured / m.predicted_speedup_from_passes,
    )


def alpha_from_share(share: float, k: int) -> float:
    """The per-token acceptance a whose expected accepted share of K drafts, (a + a^2 + ... + a^K) / K,
    is `share` (independent acceptance, each step drafting K): a recorded accepted share as the
    alpha the formulas above take. Bisection: the share grows with a."""
    if not 0.0 <= share <= 1.0 or k < 1:
        raise ValueError(f"an accepted share lies in 0..1 and K >= 1, got {share} at K = {k}")
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid**i for i in range(1, k + 1)) / k < share:
            low = mid
        else:
            high = mid
    return (low + high) / 2
