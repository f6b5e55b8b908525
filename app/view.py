"""What the page shows for a run, as a dict of updates: the same function draws a live frame, a
finished run, a replayed one and one loaded from a file, so they cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec.measure.compare import departure, first_difference, tie_verdict
from specdec.core.config import GenerationConfig
from specdec.measure.metrics import summarize, summarize_runs
from specdec.serving.gpu_budget import CaptureReport

from . import charts, render, theory
from .components import Page
from .lanes import Lane


@dataclass
class RunView:
    """Everything needed to draw one run on the page."""

    config: GenerationConfig
    dtype_name: str  # what counts as a numerical tie depends on the dtype
    status: str = ""  # the one line above the panes; what ends or stops the run is added to it
    status_details: str = ""  # behind the line's disclosure: where the pair is from, its kernel's faithfulness, the head file
    spec: list = field(default_factory=list)  # StepEvents of the speculative run
    plain: list = field(default_factory=list)  # StepEvents of the plain run (empty until it starts)
    finished: bool = False  # both runs done (or stopped): the badge may compare them
    stopped: bool = False
    show_rejected: bool = True
    lossy_wanted: bool = False  # run the lossy lane (plain decoding, int4 target) after the others
    lossy: list = field(default_factory=list)  # its StepEvents
    pending: dict = field(default_factory=dict)  # Lane.SPEC or PLAIN -> display text a remote engine sent before its steps (vLLM)
    decode_step_s: float | None = None  # a decode step timed after the run, when plain decoding did not run
    capture: CaptureReport | None = None  # what the runner spent capturing passes in this run's GPU call (gpu_budget counts it)
    # What a saved record keeps besides the events (specdec.record.run_file): the prompt, the pair, the machine, when.
    prompt: str = ""
    pair: dict = field(default_factory=dict)
    machine: dict = field(default_factory=dict)
    created: str = ""


def badge(view: RunView) -> str | None:
    """Whether the two outputs agree; only for two complete runs."""
    if not (view.finished and view.plain and not view.stopped):
        return None
    if not view.config.greedy:
        return ('<div class="badge">sampled: each run draws its own random numbers, so their texts may differ '
                "(both follow the target distribution)</div>")
    device = str(view.pair.get("device", "cpu")).split(":")[0]
    diff = first_difference(view.spec, view.plain, view.dtype_name, view.config.target_kernel, device)
    if diff is None:
        return render.render_badge(identical=True)
    return render.render_badge(
        identical=False, index=diff.index, margin=diff.margin, is_tie=diff.is_tie, verdict=tie_verdict(diff),
        spec_text=None if diff.spec_token is None else diff.spec_text,  # None: that run ended first
        plain_text=None if diff.plain_token is None else diff.plain_text,
    )


def lossy_note(view: RunView) -> str:
    """Speed of the int4 target, and where its text leaves the exact target's (the speculative run's)."""
    if not view.lossy:
        return ""
    if not view.finished or view.stopped:
        return ""  # judged once the lane has finished
    speed = summarize(view.lossy).tokens_per_s
    if not view.config.greedy:
        return ('<div class="badge">sampled: the lossy lane draws its own random numbers; compare it with the '
                "target in greedy mode (temperature 0)</div>")
    d = departure(view.lossy, view.spec, view.dtype_name)
    diff = d.difference
    if diff is None:
        return render.render_departure(speed, identical=True, compared=d.compared)
    return render.render_departure(speed, identical=False, index=diff.index, agree=d.agree, compared=d.compared,
                                   lossy_text=None if diff.spec_token is None else diff.spec_text,
                                   exact_text=None if diff.plain_token is None else diff.plain_text)


def paused_why(events) -> str:
    """The cost K policy's reason for the run's last plain step ("" where it chose none)."""
    return next((e.paused_why for e in reversed(events) if e.paused_why), "")


def frame(page: Page, view: RunView, *, plots: bool = True) -> dict:
    """Updates for every output of a run; the figures only when `plots` (they are heavy)."""
    plain = summarize(view.plain) if view.plain else None
    spec = summarize_runs(view.spec, view.plain, view.decode_step_s)  # costs in the plain run's decode steps
    stats = render.render_stats(spec, plain, badge=badge(view), plain_done=view.finished)
    out = {
        page.predictions: theory.render_predictions(spec, plain, view.finished, paused_why(view.spec)),
        page.status: render.render_status(view.status + (" \u2014 stopped" if view.stopped else ""), view.status_details),
        page.spec_html: render.render_spans(view.spec, view.show_rejected) or render.render_pending(view.pending.get(Lane.SPEC, ())),
        page.plain_html: render.render_spans(view.plain, False) if view.plain else render.render_pending(view.pending.get(Lane.PLAIN, ())),
        page.stats: stats,
        page.spec_events: view.spec,
        page.plain_events: view.plain,
        page.run_view: view,
    }
    if view.lossy_wanted:
        out[page.lossy_html] = render.render_tokens(view.lossy, False)
        out[page.lossy_note] = lossy_note(view)
    if plots:
        out[page.acc_plot] = charts.acceptance_figure(view.spec)
        out[page.thr_plot] = charts.throughput_figure(view.spec, view.plain)
        out[page.tpp_plot] = charts.tokens_per_pass_figure(view.spec)
        out[page.position_plot] = charts.position_figure(view.spec)
        out[page.lengths_plot] = charts.accepted_lengths_figure(view.spec)
    return out
