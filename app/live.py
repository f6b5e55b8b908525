"""A live run: the request's checks (app/request.py), then the speculative run then the plain run
streamed, a frame at a time, no more often than the page can afford.

The GPU work is app.gpu_call's `stream_events`, iterated on the process's torch thread
(specdec.serving.torch_thread, which carries the visitor's context there). Everything that
touches the page stays in `live_run`, which reads the events, ends the run between two steps when
Stop is pressed or the visitor leaves (closing the stream ends the worker's generator too), and
frees the pair only when the torch thread has left the run. `stream_frames` is the page's one
streaming loop: Run to end (app/stepping.py) streams the rest of a stepped run through it too.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from enum import Enum

import gradio as gr

from specdec.serving import gpu_budget
from specdec.serving import torch_thread
from specdec.core.config import GenerationConfig
from specdec.engines.base import EngineError
from specdec.kernels.faithfulness_record import faithfulness_note
from specdec.record.run_file import machine_info, now_utc, pair_info

from . import engine_choice, gpu_call, render, theory
from .components import Page, StopFlag
from .lanes import Lane
from .request import admitted, head_label, refusal
from .settings import GENERATE
from .view import RunView, frame

# The browser draws each frame on the cores the engine runs on (docs/app_speed.md: on 2 cores,
# headless chromium spent 7 to 9.6 CPU s on a streaming page during a 50 s run, against 3.4 to 4.6
# for the same page idle), so frames are few.
HTML_EVERY_S = 0.5  # so the token panes are redrawn at most twice a second
PLOT_EVERY_S = 10.0  # and the plots every 10 s while a run streams, and when each run ends
BUDGET = 0.02  # each kind of frame may also take at most this share of the run's time on the server (see Throttle)

_running: dict[str, StopFlag] = {}  # session -> the stop flag of its run in flight


def stop_session(session_hash: str | None) -> None:
    """The visitor left (tab closed): their run ends before its next step."""
    flag = _running.get(session_hash or "")
    if flag is not None:
        flag.set()


class Throttle:
    """Says when a frame is due, so that the page does not slow the engine it measures.

    A frame costs CPU time on the cores the engine runs on: building it, and Gradio sending it,
    until the handler is asked for the next one. That cost is measured, and the next frame of the
    same kind waits until it is at most BUDGET of the time since the last one, and never comes sooner
    than HTML_EVERY_S (panes) or PLOT_EVERY_S (plots) after it: the browser's own drawing, on the
    same cores, is not seen from here. A frame that costs more than these floors allow (three
    figures of a long run) pushes the next one further out."""

    def __init__(self):
        self.last_html = self.last_plot = float("-inf")  # the first frame is due at once
        self.html_cost = self.plot_cost = 0.0
        self.plots_now = False  # set when a run ends: its plots are drawn in the next frame

    def due(self) -> tuple[bool, bool]:
        """(panes due, plots due); plots are only ever drawn with the panes."""
        now = time.monotonic()
        if now - self.last_html < max(HTML_EVERY_S, self.html_cost / BUDGET):
            return False, False
        self.last_html = now
        plots = self.plots_now or now - self.last_plot >= max(PLOT_EVERY_S, self.plot_cost / BUDGET)
        if plots:
            self.last_plot, self.plots_now = now, False
        return True, plots

    def spent(self, seconds: float, plots: bool) -> None:
        """What the last frame cost, from building it until Gradio asked for the next."""
        if plots:
            self.plot_cost = seconds
        else:
            self.html_cost = seconds


def live_run(page: Page, values: dict, progress: gr.Progress, session: str | None = None):
    """Stream the speculative run, then (if asked) the plain run with the same settings; yields dicts of updates."""
    stop = values[page.stop]
    stop.clear()
    with ExitStack() as held:
        try:
            request = held.enter_context(admitted(page, values, progress, GENERATE))
        except ValueError as err:
            yield {page.status: render.render_status(refusal(err))}
            return
        if session:
            _running[session] = stop
            held.callback(_running.pop, session, None)
        s, pair, prompt = request.settings, request.pair, request.prompt
        view = new_view(pair, s.config, s.show_rejected, prompt, lossy_wanted=s.plain_int4 and s.can.lossy_lane)
        if s.can.in_process:
            lanes = gpu_call.stream_events(pair.name, request.prompt_ids, s.config, s.compare, s.plain_int4)
        else:  # a real engine's servers: the same lanes, read over HTTP
            view.status, view.status_details = engine_choice.status(s.engine, s.spec_url, s.plain_url, pair, s.compare)
            lanes = engine_choice.remote_lanes(s.engine, s.spec_url, s.plain_url, prompt, pair, s.config, s.compare)
        stream = torch_thread.Stream(lanes, stop)
        held.callback(stream.join)  # before the pair is released: the engine may be inside a step
        yield from stream_frames(page, view, stream, stop, server_errors=not s.can.in_process)
        view.finished, view.stopped = True, stop.is_set()
        if not view.stopped and s.can.in_process:  # the GPU budget learns this project's engine's step times only
            key = gpu_budget.cost_key(pair.name, s.config)
            gpu_budget.record(key, s.config, view.spec, view.plain)
            if view.capture is not None:  # the next call's duration counts the capture this one measured
                gpu_budget.record_capture(key, view.capture)
        yield last_frame(page, values, view)


def stream_frames(page: Page, view: RunView, stream: torch_thread.Stream, stop, *, server_errors: bool = False):
    """Frames while the lanes arrive, as often as the Throttle allows: the one streaming loop of the
    page (a live run, and Run to end of a stepped one). A run that does not come to its end (Stop,
    the page went away and Gradio closed this generator, the engine failed) is stopped."""
    throttle, pending, done, first = Throttle(), False, False, True
    try:
        while not done:
            for lane, item in stream.take(timeout=HTML_EVERY_S if pending else 1.0):
                taken = receive(view, Lane(lane), item, throttle, server_errors)
                done, pending = done or taken is Taken.OVER, pending or taken is Taken.NEW
            if pending and not done:
                html, plots = throttle.due()
                if html:
                    started = time.perf_counter()
                    yield streaming_frame(page, view, plots=plots, first=first)
                    first = False
                    throttle.spent(time.perf_counter() - started, plots)  # runs when Gradio asks for the next frame
                    pending = False
    finally:
        if not done:
            stop.set()


class Taken(Enum):
    """What one item of the stream did to the view."""

    QUIET = "quiet"  # a figure the panes do not show
    NEW = "new"  # something new for the panes
    OVER = "over"  # the run is over


def receive(view: RunView, lane: Lane, item, throttle: Throttle, server_errors: bool) -> Taken:
    """Take one item of the stream into the view. `server_errors`: an engine error (a remote
    server that went away or answered wrongly) ends the run with one line instead of raising."""
    match lane:
        case Lane.ERROR if server_errors and isinstance(item, (EngineError, ValueError)):
            gr.Warning(str(item))
            view.status += f" \u2014 {item}"
            return Taken.OVER
        case Lane.ERROR:
            raise item
        case Lane.DONE:
            return Taken.OVER
        case Lane.DECODE_STEP:
            view.decode_step_s = item
            return Taken.QUIET
        case Lane.CAPTURE:
            view.capture = item
            return Taken.QUIET
        case Lane.SPEC_PENDING | Lane.PLAIN_PENDING:  # a remote engine's text before its steps are known
            view.pending.setdefault(Lane.SPEC if lane is Lane.SPEC_PENDING else Lane.PLAIN, []).extend(item.text)
            return Taken.NEW
    if lane is not Lane.SPEC and not (view.plain or view.lossy):  # the speculative run has ended:
        throttle.plots_now = True  # its charts, whole, in the next frame
    {Lane.SPEC: view.spec, Lane.PLAIN: view.plain, Lane.LOSSY: view.lossy}[lane].append(item)
    return Taken.NEW


def streaming_frame(page: Page, view: RunView, *, plots: bool, first: bool) -> dict:
    """A frame while the run streams: only what changes. The browser redraws every component it is
    sent, on the cores the engine runs on, so the status line (the same all run), the predictions
    (they wait for the end) and the per-session state go in the first frame and the last only."""
    out = frame(page, view, plots=plots)
    if not first:
        for unchanged in (page.status, page.predictions, *page.run_states()):
            out.pop(unchanged, None)
    return out


def new_view(pair, config: GenerationConfig, show_rejected: bool, prompt: str, lossy_wanted: bool = False) -> RunView:
    drafts = (["prompt lookup"] if config.uses_lookup else []) + ([f"draft {config.draft_variant}"] if config.uses_draft_model else []) \
        + (["the trained head"] if config.uses_head else [])
    named = ", ".join(drafts[:-1]) + " and " + drafts[-1] if len(drafts) > 1 else "".join(drafts)  # "a, b and c"
    head = f" Drafter: the trained head ({head_label(pair, config)})." if config.uses_head else ""
    return RunView(config=config, dtype_name=pair.dtype_name, show_rejected=show_rejected,
                   status=f"{pair.name}: target {config.target_kernel}, {config.runner} runner" + (f", {named}" if named else ""),
                   status_details=f"On {pair.device} ({pair.dtype_name}), from {pair.source}. Target kernel "
                                  f"{config.target_kernel}: {faithfulness_note(pair.name, config.target_kernel)}.{head}",
                   lossy_wanted=lossy_wanted, prompt=prompt, pair=pair_info(pair), machine=machine_info(pair),
                   created=now_utc())


def last_frame(page: Page, values: dict, view: RunView) -> dict:
    """The finished run, with the theory tab redrawn from it (and kept in the session's theory
    state, when the caller passed one)."""
    out = frame(page, view)
    out.update(theory.after_run(page, values.get(page.theory_state) or theory.TheorySession(), view))
    return out
