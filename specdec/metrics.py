"""Numbers over a run of StepEvents: acceptance, tokens per pass, speed, cost ratio, predicted speedup."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from .events import StepEvent


def expected_tokens_per_pass(a: float, k: float) -> float:
    """Leviathan et al. 2023: expected tokens per target pass = (1 - a^(K+1)) / (1 - a)."""
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def predicted_speedup(a: float, k: float, c: float) -> float:
    """Leviathan et al. 2023: expected speedup = (1 - a^(K+1)) / ((1 - a)(K c + 1))."""
    return expected_tokens_per_pass(a, k) / (k * c + 1.0)


@dataclass(frozen=True)
class RunMetrics:
    tokens: int  # new tokens emitted
    target_passes: int  # target forward passes (= steps)
    drafted: int  # draft tokens proposed
    accepted: int  # draft tokens kept
    acceptance_rate: float  # accepted / drafted (0 when nothing was drafted)
    tokens_per_step: float  # tokens / target passes
    seconds: float  # wall time of the run (prompt processing excluded)
    tokens_per_s: float
    mean_k: float  # mean draft length over steps that drafted
    draft_pass_s: float  # drafting seconds per drafted token (a draft-model pass; next to nothing for lookup)
    target_pass_s: float  # median seconds of one target pass
    cost_ratio_c: float  # draft_pass_s / target_pass_s (near 0 for prompt lookup, 0 for plain decoding)
    predicted_speedup: float  # Leviathan's prediction from acceptance_rate, mean_k and cost_ratio_c

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(events: list[StepEvent]) -> RunMetrics:
    """Summarise a run. A draft pass is the drafting time per drafted token: a draft model runs one
    pass per token, prompt lookup costs next to nothing, and a run mixing both (drafter "auto")
    gets their blended cost."""
    tokens = events[-1].total_tokens if events else 0
    passes = len(events)
    drafted = sum(len(e.drafted) for e in events)
    accepted = sum(e.accepted for e in events)
    seconds = events[-1].elapsed_s if events else 0.0
    drafting = [e for e in events if e.drafted]
    mean_k = statistics.fmean(len(e.drafted) for e in drafting) if drafting else 0.0
    target_pass_s = statistics.median(e.verify_s for e in events) if events else 0.0
    draft_pass_s = sum(e.draft_s for e in drafting) / drafted if drafted else 0.0
    c = draft_pass_s / target_pass_s if target_pass_s > 0 else 0.0
    a = accepted / drafted if drafted else 0.0
    return RunMetrics(
        tokens=tokens,
        target_passes=passes,
        drafted=drafted,
        accepted=accepted,
        acceptance_rate=a,
        tokens_per_step=tokens / passes if passes else 0.0,
        seconds=seconds,
        tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
        mean_k=mean_k,
        draft_pass_s=draft_pass_s,
        target_pass_s=target_pass_s,
        cost_ratio_c=c,
        predicted_speedup=predicted_speedup(a, mean_k, c) if drafting else 1.0,
    )
