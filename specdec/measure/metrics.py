"""Numbers over a run of StepEvents: acceptance, tokens per pass, speed, pass costs, and the three
predictions of the speedup (specdec.core.theory has the formulas).

Costs are in decode steps: one plain decoding step of the target (a one-token target pass). The
best measure of it is the plain run with the same settings; without one, a one-token target pass
timed on the same cache (specdec.measure.passcost), or the one-token steps of the run itself.
All times are means over steps, so that the accounting adds up to the run's time.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from specdec.core.events import StepEvent
from specdec.core.theory import expected_pass_counts, expected_tokens_per_pass, predicted_speedup

__all__ = ["RunMetrics", "summarize", "summarize_runs", "estimate_alpha", "expected_tokens_per_pass", "predicted_speedup"]

FROM_PLAIN = "the plain run"
FROM_ONE_TOKEN_PASS = "a one-token target pass timed after the run"
FROM_OWN_STEPS = "this run's one-token steps"


def estimate_alpha(events: list[StepEvent]) -> float:
    """Leviathan's per-token acceptance probability: accepted / (accepted + rejections), a
    rejection being a step that turned a draft token down. It is the maximum-likelihood estimate
    when each draft token is kept independently with probability alpha (a step ends at its first
    rejection, or after K acceptances with no rejection seen). accepted / drafted is not: the
    drafts after a rejection are never checked, yet count as not accepted."""
    accepted = sum(e.accepted for e in events)
    rejections = sum(1 for e in events if e.accepted < e.n_drafted)
    return accepted / (accepted + rejections) if accepted + rejections else 0.0


@dataclass(frozen=True)
class RunMetrics:
    tokens: int  # new tokens emitted
    target_passes: int  # target forward passes (= steps)
    drafted: int  # draft tokens proposed (named or only counted: StepEvent.n_drafted)
    accepted: int  # draft tokens kept
    rejections: int  # steps that turned a draft token down
    alpha: float  # per-token acceptance probability, estimated (estimate_alpha)
    accepted_share: float  # accepted / drafted (0 when nothing was drafted)
    tokens_per_pass: float  # tokens / target passes, measured
    expected_tokens_per_pass: float  # mean over drafting steps of (1 - alpha^(K+1)) / (1 - alpha), each at its own K: what independent acceptance predicts
    seconds: float  # wall time of the run (prompt processing excluded)
    tokens_per_s: float
    mean_k: float  # mean draft length over steps that drafted
    model_steps: int  # steps drafted by the draft model
    lookup_steps: int  # steps drafted by prompt lookup (no model pass)
    head_steps: int  # steps drafted by the trained head
    draft_pass_s: float | None  # drafting seconds per drafted token (a draft-model pass; next to nothing for lookup; a blend for "auto"); None: the engine does not time drafting apart
    model_draft_pass_s: float | None  # the same over the draft model's steps only (None when it drafted nothing)
    target_pass_s: float | None  # median seconds of one target pass, any length (None: not timed apart)
    verify_pass_s: float | None  # mean seconds of the target pass of a step that drafted (K+1 tokens) (None: not timed apart)
    step_s: float  # mean seconds of a whole step: drafting + target pass (from elapsed_s where an engine does not time them apart)
    decode_step_s: float | None  # seconds of one plain decode step of the target (None: not known)
    decode_step_from: str  # where decode_step_s came from (FROM_PLAIN, FROM_ONE_TOKEN_PASS, FROM_OWN_STEPS or "")
    cost_ratio_c: float | None  # draft_pass_s / decode_step_s (next to 0 for prompt lookup)
    draft_model_c: float | None  # model_draft_pass_s / decode_step_s
    verify_cost: float | None  # verify_pass_s / decode_step_s: what checking K+1 tokens costs, in decode steps
    predicted_speedup: float | None  # textbook: expected tokens per pass / (K c + 1), K = mean_k
    predicted_speedup_with_verify_cost: float | None  # expected tokens per pass / (K c + verify_cost)
    predicted_speedup_from_passes: float | None  # measured tokens per pass x decode step / step_s (the accounting)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _StepTimes:
    """What the run's step times say, in seconds (None: the engine does not time that part apart)."""

    draft_pass_s: float | None
    model_draft_pass_s: float | None
    verify_pass_s: float | None
    target_pass_s: float | None
    step_s: float
    one_token: list[float]  # target passes of the steps that drafted nothing
    timed: bool  # the engine timed drafting and the target pass apart (a remote engine does not)


def _step_times(events: list[StepEvent], drafting: list[StepEvent], by_model: list[StepEvent], drafted: int) -> _StepTimes:
    model_drafted = sum(e.n_drafted for e in by_model)
    if not all(e.draft_s is not None and e.verify_s is not None for e in events):
        # A remote engine reports neither: a step lasts from the previous step's arrival to its own.
        seconds = events[-1].elapsed_s if events else 0.0
        return _StepTimes(None, None, None, None, seconds / len(events) if events else 0.0, [], timed=False)
    return _StepTimes(
        draft_pass_s=sum(e.draft_s for e in drafting) / drafted if drafted else 0.0,
        model_draft_pass_s=sum(e.draft_s for e in by_model) / model_drafted if model_drafted else None,
        verify_pass_s=statistics.fmean(e.verify_s for e in drafting) if drafting else 0.0,
        target_pass_s=statistics.median(e.verify_s for e in events) if events else 0.0,
        step_s=statistics.fmean(e.draft_s + e.verify_s for e in events) if events else 0.0,
        one_token=[e.verify_s for e in events if not e.n_drafted],
        timed=True,
    )


def _predictions(times: _StepTimes, decode_step_s: float | None, expected: float, mean_k: float,
                 tokens_per_pass: float, drafted_any: bool) -> tuple:
    """(c, draft model's c, verify cost, textbook, with verify cost, from passes): all None without
    a decode step; only the accounting (from passes) when the engine does not time steps apart."""
    c = draft_c = verify = textbook = with_verify = from_passes = None
    if decode_step_s and not times.timed:  # only the accounting needs no time apart
        from_passes = tokens_per_pass * decode_step_s / times.step_s if times.step_s > 0 else None
    elif decode_step_s:
        c = times.draft_pass_s / decode_step_s
        draft_c = times.model_draft_pass_s / decode_step_s if times.model_draft_pass_s is not None else None
        verify = times.verify_pass_s / decode_step_s if drafted_any else 1.0
        textbook = expected / (mean_k * c + 1)
        with_verify = expected / (mean_k * c + verify)
        from_passes = tokens_per_pass * decode_step_s / times.step_s if times.step_s > 0 else None
    return c, draft_c, verify, textbook, with_verify, from_passes


def summarize(events: list[StepEvent], *, decode_step_s: float | None = None, decode_step_from: str = "") -> RunMetrics:
    """Summarise a run. `decode_step_s`: one plain decode step of the target, when known from
    elsewhere (see summarize_runs); else the run's own one-token steps, if it has any."""
    tokens = events[-1].total_tokens if events else 0
    passes = len(events)
    drafted = sum(e.n_drafted for e in events)
    accepted = sum(e.accepted for e in events)
    seconds = events[-1].elapsed_s if events else 0.0
    drafting = [e for e in events if e.n_drafted]
    by_model = [e for e in drafting if e.drafter == "model"]
    mean_k = statistics.fmean(e.n_drafted for e in drafting) if drafting else 0.0
    times = _step_times(events, drafting, by_model, drafted)
    if decode_step_s is None and times.one_token:
        decode_step_s, decode_step_from = statistics.fmean(times.one_token), FROM_OWN_STEPS
    if decode_step_s is None:
        decode_step_from = ""
    alpha = estimate_alpha(events)
    # Per step, each at the K it drafted: the formula is concave in K, so evaluating it once at the
    # mean K (adaptive K) would overstate it. The cost side, K c + 1, is linear: the mean K is exact there.
    counts = expected_pass_counts(alpha, [len(e.drafted) for e in drafting])
    expected = sum(n * count for n, count in enumerate(counts, 1)) / len(drafting) if drafting else 1.0
    tokens_per_pass = tokens / passes if passes else 0.0
    c, draft_c, verify, textbook, with_verify, from_passes = _predictions(
        times, decode_step_s, expected, mean_k, tokens_per_pass, bool(drafting))
    return RunMetrics(
        tokens=tokens, target_passes=passes, drafted=drafted, accepted=accepted,
        rejections=sum(1 for e in events if e.accepted < e.n_drafted), alpha=alpha,
        accepted_share=accepted / drafted if drafted else 0.0, tokens_per_pass=tokens_per_pass,
        expected_tokens_per_pass=expected, seconds=seconds, tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
        mean_k=mean_k, model_steps=len(by_model), lookup_steps=sum(1 for e in drafting if e.drafter == "lookup"),
        head_steps=sum(1 for e in drafting if e.drafter == "head"),
        draft_pass_s=times.draft_pass_s, model_draft_pass_s=times.model_draft_pass_s, target_pass_s=times.target_pass_s,
        verify_pass_s=times.verify_pass_s, step_s=times.step_s, decode_step_s=decode_step_s,
        decode_step_from=decode_step_from, cost_ratio_c=c, draft_model_c=draft_c, verify_cost=verify,
        predicted_speedup=textbook, predicted_speedup_with_verify_cost=with_verify,
        predicted_speedup_from_passes=from_passes,
    )


def summarize_runs(
    spec_events: list[StepEvent], plain_events: list[StepEvent] | None = None, decode_step_s: float | None = None,
) -> RunMetrics:
    """The speculative run's metrics with the best decode step at hand: the plain run's mean step
    (same settings, same machine, same moment), else a one-token target pass timed after the run."""
    if plain_events:
        return summarize(spec_events, decode_step_s=summarize(plain_events).step_s, decode_step_from=FROM_PLAIN)
    if decode_step_s:
        return summarize(spec_events, decode_step_s=decode_step_s, decode_step_from=FROM_ONE_TOKEN_PASS)
    return summarize(spec_events)


def measured_speedup(spec: RunMetrics, plain: RunMetrics | None) -> float | None:
    """Speculative tokens/s over plain tokens/s (prompt processing excluded on both sides)."""
    if plain is None or not plain.tokens_per_s or not spec.tokens_per_s:
        return None
    return spec.tokens_per_s / plain.tokens_per_s
