"""The theory panel, laid out: why this speedup (the three predictions beside the measurement),
speedup vs K with a real sweep, the co-design map, and what a pass costs on this machine.
Every number comes from specdec (metrics, theory, passcost); this module writes the captions."""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from specdec.engines import choice
from specdec.engines.base import SPECDEC
from specdec.measure.metrics import RunMetrics, measured_speedup, summarize, summarize_runs
from specdec.measure.passcost import PassCosts
from specdec.core.theory import best_k, prediction_gap, speedup_curve

from . import theory_charts
from .kernel_verdicts import kernels_sentence

# Pass costs are facts about this machine and pair, not about a visitor: one measurement per
# (pair, dtype) serves every session of this process.
PASS_COSTS: dict[tuple[str, str], PassCosts] = {}
# The cost table of every target kernel (and of llama.cpp, when its servers run here), per (pair, dtype):
# name -> PassCosts, from "Measure pass costs". Whether speculation pays depends on the kernel.
KERNEL_COSTS: dict[tuple[str, str], dict[str, PassCosts]] = {}

INTRO = ("Leviathan et al. 2023 model speculative decoding with three numbers: the chance \u03b1 that one draft "
         "token is kept, the cost c of a draft pass and the cost of the target's check of K+1 tokens, both in "
         "plain decode steps. These figures use the numbers of the last finished run (on the Live tab).")

WAITING = ('<div class="predictions"><p class="caption">When a run with plain decoding beside it ends, this box '
           "puts its measured speedup beside three predictions and says what separates them.</p></div>")


DRAFTER_LABELS = {"model": "draft model", "lookup": "prompt lookup", "auto": "auto", "head": "trained head",
                  "auto_head": "auto (head)", "auto_both": "auto (head or draft model)"}


@dataclass(frozen=True)
class DrafterPoint:
    label: str  # e.g. "draft model K=5"
    alpha: float
    c: float
    hover: str


@dataclass
class TheorySession:
    """Per session (gr.State): every drafter run since the page was opened, the last sweep, the
    last finished run. Mutated in place; a deep copy (Gradio's per-session copy) is a fresh one."""

    points: list = field(default_factory=list)  # DrafterPoint
    sweep: list = field(default_factory=list)  # specdec.engines.sweep.SweepPoint, of the last sweep
    metrics: RunMetrics | None = None  # of the last finished speculative run (with its decode step)
    k: int | None = None  # its K (mean draft length, rounded)
    speedup: float | None = None  # its measured speedup, when plain decoding ran beside it
    pair_key: tuple[str, str] | None = None
    kernel: str = "dense"  # what ran the target of the last run: a target kernel, or an engine with its own cost table

    def __deepcopy__(self, memo):
        return TheorySession()

    def record(self, metrics: RunMetrics, plain: RunMetrics | None, config, pair_key, engine: str = SPECDEC) -> None:
        """Keep a finished run: its point on the co-design map and the numbers the curves need. A
        remote engine's run has no c of its own (a server does not time drafting apart): its point
        takes c from the engine's own pass costs, when they were measured here (llama.cpp's)."""
        can = choice.of_events(engine)
        self.metrics, self.pair_key = metrics, pair_key
        self.kernel = engine if can.own_cost_table else getattr(config, "target_kernel", "dense")
        self.k = max(1, round(metrics.mean_k)) if metrics.drafted else None
        self.speedup = measured_speedup(metrics, plain)
        c = metrics.cost_ratio_c
        if c is None and can.own_cost_table and self.costs is not None:
            c = self.costs.c
        if metrics.drafted and c is not None:
            label = f"#{len(self.points) + 1} {engine} K={self.k}"  # a server's own K, as it reported it
            if can.follows_settings:  # the page's drafter, K, policy and kernel
                drafter = DRAFTER_LABELS.get(config.drafter, config.drafter)
                policy = f" {config.k_policy}" if config.k_policy != "fixed" else ""
                label = f"#{len(self.points) + 1} {drafter} K={config.k}{policy} [{self.kernel}]"
            measured = f", measured {self.speedup:.2f}\u00d7" if self.speedup else ""
            hover = f"{label}: \u03b1 {metrics.alpha:.2f}, c {c:.3f}, {metrics.tokens_per_pass:.2f} tokens per pass{measured}"
            self.points.append(DrafterPoint(label, metrics.alpha, c, hover))

    @property
    def tables(self) -> dict[str, PassCosts]:
        """The measured cost table of each kernel (and llama.cpp) for this pair, when measured."""
        return KERNEL_COSTS.get(self.pair_key, {}) if self.pair_key else {}

    @property
    def costs(self) -> PassCosts | None:
        """The cost table of what ran the last run: its kernel's, else the pair's single measurement."""
        return self.tables.get(self.kernel) or (PASS_COSTS.get(self.pair_key) if self.pair_key else None)


def updates(page, session: TheorySession) -> dict:
    """Everything the tab shows, from the session's last run, sweep and the pass costs."""
    m, costs = session.metrics, session.costs
    return {
        page.k_curve: theory_charts.k_curve_figure(m, costs, session.sweep, session.k, session.speedup),
        page.k_caption: k_caption(session),
        page.codesign: theory_charts.codesign_figure(session.k, _verify_cost(session), session.points,
                                                     break_even=_other_verify_costs(session)),
        page.codesign_caption: codesign_caption(session),
        page.passcost_plot: theory_charts.passcost_figure(costs, session.k, tables=session.tables),
        page.passcost_caption: passcost_caption(costs, session.k, session.tables, m.alpha if m is not None and m.drafted else None),
    }


def after_run(page, session: TheorySession, view) -> dict:
    """A run has ended: keep it in the session and redraw the tab from it."""
    plain = summarize(view.plain) if view.plain else None
    session.record(summarize_runs(view.spec, view.plain, view.decode_step_s), plain, view.config,
                   (view.pair.get("name", ""), view.dtype_name), engine=view.spec[0].engine if view.spec else SPECDEC)
    return updates(page, session)


def _verify_cost(session: TheorySession) -> float | None:
    m, costs = session.metrics, session.costs
    if costs is not None and session.k:
        return costs.verify_cost(session.k)
    return m.verify_cost if m is not None and m.drafted else None


def _other_verify_costs(session: TheorySession) -> dict[str, float]:
    """name -> verify cost at the session's K of every other measured kernel (and llama.cpp): each
    gets its own break-even line on the co-design map."""
    if not session.k:
        return {}
    return {name: costs.verify_cost(session.k) for name, costs in session.tables.items() if name != session.kernel}


# --- captions -------------------------------------------------------------------------------------


def k_caption(session: TheorySession) -> str:
    m = session.metrics
    if m is None or not m.drafted or theory_charts.draft_c(m) is None:
        return ("*Speedup vs K* appears after a speculative run: the predicted speedup for K = 1..16 from that run's "
                "\u03b1, c and verify cost. **Sweep K** really runs the prompt at six draft lengths and plots the "
                "measured points on the same axes.")
    c, costs = theory_charts.draft_c(m), session.costs
    verify = ("the verify cost of each K from the measured pass costs"
              if costs is not None else f"the run's verify cost {m.verify_cost:.2f} for every K (measure pass costs for how it grows with K)")
    with_verify = speedup_curve(m.alpha, c, theory_charts.verify_cost_at(m, costs), theory_charts.KS)
    best = best_k(theory_charts.KS, with_verify)
    text = (f"Curves from this run's \u03b1 = {m.alpha:.2f} and c = {c:.3f}: the dashed one assumes checking K+1 tokens "
            f"costs one decode step (the textbook), the solid one uses {verify}. Longer drafts help while the next "
            f"token is likely kept (\u03b1^K) and cost K draft passes each; the solid curve peaks at **K = {best}** "
            f"({with_verify[best - 1]:.2f}\u00d7).")
    if session.sweep:
        above = sum(1 for p in session.sweep if p.speedup and p.speedup > with_verify[p.k - 1])
        text += (f" Green: measured by Sweep K (each point a real run of the prompt, beside one plain run); "
                 f"{above} of {len(session.sweep)} lie above the solid curve. A point above it means passes carried more "
                 "tokens than independent acceptance predicts: acceptance comes in bursts.")
    return text


def codesign_caption(session: TheorySession) -> str:
    verify = _verify_cost(session)
    if not session.k or not verify:
        return ("*The co-design map* appears after a speculative run: per-token acceptance \u03b1 across, the draft's "
                "cost c up, lines of equal predicted speedup for the run's K and verify cost, and every drafter run "
                "since the page was opened as a point.")
    return (f"Lines of equal predicted speedup (1 - \u03b1^(K+1)) / ((1 - \u03b1)(K c + v)) for K = {session.k} and verify "
            f"cost v = {verify:.2f}; the bold red line is break-even, above it the drafter loses time. Moving right "
            "(a better guess) and moving down (a cheaper draft) both help: a cheaper draft that is kept a little less "
            "often can win. Each point is a drafter run since the page was opened (prompt lookup sits near c = 0: it "
            "costs no draft pass; the trained head sits low too, one layer a guess, and its \u03b1 is what its training bought). The lines assume independent acceptance; bursty acceptance puts real runs above them.")


def passcost_caption(costs: PassCosts | None, k: int | None, tables: dict | None = None, alpha: float | None = None) -> str:
    if costs is None and not tables:
        return ("*What a pass costs here*: **Measure pass costs** times one target pass over 1, 2, 3, 4, 6, 8, 12 and 16 "
                "tokens on this machine for each target kernel (dense, int8, q4k, w8a8 and w4a8 where they run; and llama.cpp when its "
                "servers run here), median of 3 after 200 cached positions, beside one draft pass. Speculative decoding pays where "
                "checking K+1 tokens costs about one decode step.")
    k = k or 5
    text = ""
    if costs is not None:
        v = costs.verify_cost(k)
        verdict = (f"checking K+1 = {k + 1} tokens costs {v:.2f} decode steps: about one, as where decoding is "
                   "memory-bound (the weights are read once per pass however many tokens it scores), so the check is "
                   "nearly free and speculation pays" if v < 1.3 else
                   f"checking K+1 = {k + 1} tokens costs {v:.2f} decode steps: the pass is not memory-bound here (its time "
                   "grows with the tokens it scores), so each check costs more than a decode step and speculation pays only "
                   "if passes carry well over that many tokens")
        draft = (f"; one draft pass takes {1000 * costs.draft_s:.1f} ms, c = {costs.c:.3f}" if costs.draft_s is not None else "")
        text = (f"One target pass over n tokens, {costs.context} positions cached, median of {costs.repeats}: "
                f"{', '.join(f'{n}: {1000 * t:.1f} ms' for n, t in zip(costs.sizes, costs.target_s))}{draft}. Here {verdict}.")
    if tables:
        text += " " + kernels_sentence(tables, k, alpha)
    return text.strip()


# --- why this speedup -----------------------------------------------------------------------------


def render_predictions(spec: RunMetrics | None, plain: RunMetrics | None, finished: bool, paused_why: str = "") -> str:
    """The measured speedup, the three predictions with one caption each, and what separates them.
    paused_why: the K policy's reason for its last plain step (specdec.core.k_policy), said where it chose them."""
    if finished and spec is not None and not spec.drafted and paused_why:
        return (f'<div class="predictions"><div class="pred-title">Why this speedup</div><p>No step drafted: the K '
                f"policy chose plain steps, since {escape(paused_why)}. Speculative decoding here is plain decoding of "
                "the same target.</p></div>")
    if spec is None or not finished or not spec.drafted or plain is None or not plain.tokens_per_s:
        return WAITING
    measured = measured_speedup(spec, plain)
    gap = prediction_gap(measured, spec)
    if gap is None:
        return WAITING
    k = f"{spec.mean_k:.1f}".rstrip("0").rstrip(".")
    rows = [
        ("measured", measured, None, "speculative tok/s \u00f7 plain tok/s, prompt processing excluded"),
        ("textbook", gap.textbook, "textbook",
         f"(1 - \u03b1^(K+1)) / ((1 - \u03b1)(K c + 1)) with \u03b1 = {spec.alpha:.2f}, K = {k}, c = {spec.cost_ratio_c:.3f}: "
         "independent acceptance, and checking K+1 tokens costs one decode step"),
        ("with verify cost", gap.with_verify_cost, "with_verify_cost",
         f"the same with the measured verify cost {spec.verify_cost:.2f} in place of the 1"),
        ("from passes", gap.from_passes, "from_passes",
         f"{spec.tokens_per_pass:.2f} measured tokens per pass \u00d7 decode step {1000 * spec.decode_step_s:.1f} ms \u00f7 "
         f"measured step {1000 * spec.step_s:.1f} ms (K draft passes + one verify pass)"),
    ]
    body = "".join(
        f'<tr class="pred-{escape(key or "measured")}"><th>{escape(name)}</th><td class="num">{value:.2f}\u00d7</td>'
        f'<td class="num">{"" if key is None else f"{gap.ratio(key):.2f}"}</td><td>{escape(caption)}</td></tr>'
        for name, value, key, caption in rows
    )
    table = ('<table class="pred-table"><tr><th></th><th>speedup</th><th title="measured / predicted">measured / '
             f"predicted</th><th>how it is computed</th></tr>{body}</table>")
    paused = f" Plain steps where the K policy chose them: {escape(paused_why)}." if paused_why else ""
    return (f'<div class="predictions"><div class="pred-title">Why this speedup</div>{table}'
            f"<p>{escape(verdict(gap, spec))}{paused}</p></div>")


def verdict(gap, spec: RunMetrics) -> str:
    """Which prediction explains the measurement, and what the gaps between them mean."""
    names = {"textbook": "the textbook", "with_verify_cost": "the prediction with the verify cost", "from_passes": "the accounting from passes"}
    best = gap.closest
    off = abs(gap.ratio(best) - 1)
    within = f"within {off:.0%}" if off >= 0.005 else "equal to it, to rounding"
    out = [f"{names[best].capitalize()} explains the measured {gap.measured:.2f}\u00d7 best ({within})."]
    if abs(gap.verify_factor - 1) > 0.03:
        more = "more" if spec.verify_cost > 1 else "less"
        out.append(f"Verify cost: checking K+1 tokens costs {spec.verify_cost:.2f} decode steps here, {more} than the "
                   f"textbook's 1, which scales its figure by {gap.verify_factor:.2f}.")
    if abs(gap.burst_factor - 1) > 0.03:
        out.append(f"Bursty acceptance: passes carried {spec.tokens_per_pass:.2f} tokens, where independent acceptance at "
                   f"\u03b1 = {spec.alpha:.2f} predicts {spec.expected_tokens_per_pass:.2f} (\u00d7{gap.burst_factor:.2f}): "
                   + ("a draft is usually right all the way or wrong early." if gap.burst_factor > 1 else
                      "rejections were spread out more evenly than independence predicts."))
    if abs(gap.unexplained - 1) > 0.1:
        out.append(f"The measurement is {gap.unexplained:.2f}× the accounting: time spent outside the passes, or "
                   "noise from other work on this machine while the two runs took turns.")
    elif best == "from_passes":
        out.append("The target and draft passes account for all the time: there is no hidden cost.")
    return " ".join(out)
