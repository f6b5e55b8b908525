"""The measured speedup beside the app's three predictions, per prompt of the bench set
(`python -m specdec bench --predictions`).

Each prompt runs speculative decoding with the settings given, then plain decoding, through the
functions `generate --compare` uses (specdec.engines.ours.OurSource.side_by_side -> specdec.measure.metrics ->
specdec.core.theory). The measured speedup is speculative tok/s over plain tok/s on the engine's
own clock (prompt processing excluded); m/p is measured / predicted. The accounting ("from
passes") takes the measured time apart into passes, so it must match within TOLERANCE on every
prompt: time spent outside the passes is all it can miss.

Every drafter (GenerationConfig.drafter: the draft model, the trained head, prompt lookup, auto):
beside the c a run measured, the c the cost K policy priced that run's drafting at from the cost
table (priced_c: per drafted token, the draft model's passes with each step's catch-up, the head's
first draft of a step at head_first_s and each further one at head_s, 0 for prompt lookup), so the
figures the policy chooses from stand next to what the run then cost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specdec.core.config import GenerationConfig
from specdec.core.theory import PredictionGap, expected_pass_counts, prediction_gap
from specdec.engines.assemble import prepare
from specdec.engines.ours import OurSource
from specdec.measure.metrics import RunMetrics

TOLERANCE = 0.10  # the largest |measured / from passes - 1| on any prompt that still counts as matching


@dataclass(frozen=True)
class PromptPrediction:
    prompt: str  # prompt id
    metrics: RunMetrics  # the speculative run's, with the plain run's decode step
    gap: PredictionGap | None  # the measured speedup and the three predictions (None: one is missing)
    ones: int  # drafting passes that emitted one token (the first draft token rejected)
    full: int  # drafting passes that kept every draft token
    expected_ones: float  # the same two counts, had acceptance been independent per token at alpha
    expected_full: float
    same_as_plain: bool
    priced_c: float | None = None  # the c the cost K policy prices for this drafter (the cost table's; None: not known)


def bursts(events, alpha: float) -> tuple[int, int, float, float]:
    """Bursts show in the shape more than in the mean: (passes with 1 token, passes with every
    draft kept, and what independent acceptance at alpha expects of each)."""
    drafting = [e for e in events if e.drafted]
    counts = expected_pass_counts(alpha, [len(e.drafted) for e in drafting])
    ones = sum(1 for e in drafting if len(e.emitted) == 1)
    full = sum(1 for e in drafting if e.accepted == len(e.drafted))
    return ones, full, counts[0] if counts else 0.0, sum(alpha ** len(e.drafted) for e in drafting)


def predict(pair, prompts: list[dict], config: GenerationConfig) -> list[PromptPrediction]:
    """Each prompt's speculative run beside plain decoding, after a short warm-up of both (the
    first passes of a process pay for allocations; a cost table is measured there, once)."""
    first = prompts[0]
    OurSource(pair, replace(config, max_new_tokens=8)).side_by_side(first["prompt"], chat=first.get("chat"), plain=True)
    costs = prepare(pair, replace(config, k_policy="cost")).costs
    rows = []
    for entry in prompts:
        r = OurSource(pair, config).side_by_side(entry["prompt"], chat=entry.get("chat"), plain=True)
        gap = prediction_gap(r.speedup, r.spec) if r.speedup else None
        rows.append(PromptPrediction(entry.get("id", "?"), r.spec, gap, *bursts(r.spec_events, r.spec.alpha),
                                     same_as_plain=r.difference is None, priced_c=priced_c(r.spec_events, costs)))
    return rows


def catch_ups(events) -> dict[int, int]:
    """Step -> the tokens the cost policy priced the draft model's first pass at, for each step it
    drafted: 1, plus every token of the plain and lookup steps since it last drafted
    (specdec.core.proposers.model.ModelProposer.unseen), so it follows from the events alone."""
    fed, position, caught_up = {}, 0, 0  # tokens generated so far; and after the last step the draft model drafted
    for e in events:
        if e.drafter == "model":
            fed[e.step] = position - caught_up + 1
            caught_up = position + len(e.emitted)
        position += len(e.emitted)
    return fed


def priced_c(events, costs) -> float | None:
    """The c the cost K policy priced this run's drafting at, per drafted token (as the run's own c is
    counted: specdec.measure.metrics), each drafting step at priced_draft_s. None: nothing drafted,
    or the table lacks a drafter's cost."""
    drafting = [e for e in events if e.drafted]
    if costs is None or not drafting:
        return None
    fed, seconds = catch_ups(events), 0.0
    for e in drafting:
        step_s = priced_draft_s(e, fed, costs)
        if step_s is None:
            return None
        seconds += step_s
    return seconds / sum(len(e.drafted) for e in drafting) / costs.decode_step_s


def priced_draft_s(event, fed: dict[int, int], costs) -> float | None:
    """What the cost K policy prices a drafting step's drafts at: the draft model's first pass at its
    catch-up (costs.draft_pass_s over fed[step] tokens, `fed` from catch_ups), the passes after it at
    draft_s; the head's first draft at head_first_s and the drafts after it at head_s; prompt lookup
    at 0. None: the table lacks that drafter's cost."""
    n = len(event.drafted)
    if event.drafter == "model" and costs.draft_s is not None:
        return costs.draft_pass_s(fed[event.step]) + (n - 1) * costs.draft_s
    if event.drafter == "head" and costs.head_s is not None:
        first = costs.head_s if costs.head_first_s is None else costs.head_first_s
        return first + (n - 1) * costs.head_s
    if event.drafter == "lookup":
        return 0.0
    return None


def largest_gap(rows: list[PromptPrediction]) -> float | None:
    """The largest |measured / from passes - 1| over the prompts (None: no prompt had predictions)."""
    gaps = [abs(r.gap.ratio("from_passes") - 1) for r in rows if r.gap is not None]
    return max(gaps) if gaps else None


def within_tolerance(rows: list[PromptPrediction], tolerance: float = TOLERANCE) -> bool:
    worst = largest_gap(rows)
    return worst is not None and worst <= tolerance and all(r.gap is not None for r in rows)


HEADER = ("| prompt | \u03b1 | accepted share | tokens / pass (expected from \u03b1) | passes with 1 / K+1 tokens (expected) | "
          "c (priced) | verify cost | measured | textbook (m/p) | with verify cost (m/p) | from passes (m/p) | same as plain |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")


def row_line(r: PromptPrediction) -> str:
    m, g = r.metrics, r.gap
    head = (f"| {r.prompt} | {m.alpha:.2f} | {m.accepted_share:.0%} | {m.tokens_per_pass:.2f} ({m.expected_tokens_per_pass:.2f}) | "
            f"{r.ones} / {r.full} ({r.expected_ones:.1f} / {r.expected_full:.1f}) | ")
    if g is None:
        return head + "- | - | - | - | - | - | " + ("yes" if r.same_as_plain else "no") + " |"
    priced = "" if r.priced_c is None else f" ({r.priced_c:.3f})"
    return head + (f"{m.cost_ratio_c:.3f}{priced} | {m.verify_cost:.2f} | {g.measured:.2f} | {g.textbook:.2f} ({g.ratio('textbook'):.2f}) | "
                   f"{g.with_verify_cost:.2f} ({g.ratio('with_verify_cost'):.2f}) | "
                   f"{g.from_passes:.2f} ({g.ratio('from_passes'):.2f}) | {'yes' if r.same_as_plain else 'no'} |")


def table(rows: list[PromptPrediction], tolerance: float = TOLERANCE) -> str:
    """The markdown table, and whether the accounting is within `tolerance` on every prompt."""
    worst = largest_gap(rows)
    verdict = "yes" if within_tolerance(rows, tolerance) else "NO"
    largest = f"largest gap {worst:.1%}" if worst is not None else "no prompt had a prediction"
    return "\n".join([HEADER, *map(row_line, rows), "",
                      f"accounting within {tolerance:.0%} of the measured speedup on every prompt: {verdict} ({largest})"])


def as_json(rows: list[PromptPrediction], tolerance: float = TOLERANCE) -> dict:
    out = []
    for r in rows:
        m, g = r.metrics, r.gap
        out.append({"prompt": r.prompt, "alpha": m.alpha, "accepted_share": m.accepted_share, "tokens_per_pass": m.tokens_per_pass,
                    "expected_tokens_per_pass": m.expected_tokens_per_pass, "passes_one_token": r.ones, "passes_all_kept": r.full,
                    "expected_one_token": r.expected_ones, "expected_all_kept": r.expected_full, "cost_ratio_c": m.cost_ratio_c,
                    "priced_c": r.priced_c,
                    "verify_cost": m.verify_cost, "measured": g and g.measured, "textbook": g and g.textbook,
                    "with_verify_cost": g and g.with_verify_cost, "from_passes": g and g.from_passes, "same_as_plain": r.same_as_plain})
    return {"prompts": out, "largest_gap": largest_gap(rows), "tolerance": tolerance,
            "within_tolerance": within_tolerance(rows, tolerance)}
