"""A live run: read the settings, stream the speculative run then the plain run, a frame at a time,
no more often than the page can afford.

The GPU work is app.gpu_call's `stream_events`, iterated on the process's torch thread
(specdec.serving.torch_thread, which carries the visitor's context there). Everything that
touches the page stays in `live_run`, which reads the events, ends the run between two steps when
Stop is pressed or the visitor leaves (closing the stream ends the worker's generator too), and
frees the pair only when the torch thread has left the run.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass

import gradio as gr

from specdec.serving import gpu_budget
from specdec.serving import torch_thread
from specdec.core.config import GenerationConfig
from specdec.engines import choice
from specdec.engines.base import Capabilities, EngineError
from specdec.kernels.faithfulness_record import faithfulness_note
from specdec.serving.pairs import shared_store
from specdec.record.run_file import machine_info, now_utc, pair_info

from . import engine_choice, gpu_call, theory
from .page import Page, StopFlag
from .view import RunView, frame

# The browser draws each frame on the cores the engine runs on (docs/app_speed.md: on 2 cores,
# headless chromium spent 7 to 9.6 CPU s on a streaming page during a 50 s run, against 3.4 to 4.6
# for the same page idle), so frames are few.
HTML_EVERY_S = 0.5  # so the token panes are redrawn at most twice a second
PLOT_EVERY_S = 10.0  # and the plots every 10 s while a run streams, and when each run ends
BUDGET = 0.02  # each kind of frame may also take at most this share of the run's time on the server (see Throttle)

def _int(value):
    """Number boxes send floats; keep non-integers as they are so validation names the field."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def _within(name: str, value, component, integer: bool = False) -> None:
    """The page's own range (narrower than the engine's), for values sent through the API."""
    low, high = component.minimum, component.maximum
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not low <= value <= high or (integer and not float(value).is_integer()):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{name} must be {kind} in {low:g}..{high:g} on this page, got {value!r}")


def read_config(page: Page, values: dict) -> GenerationConfig:
    """The run's settings from the controls, unprocessed by Gradio (so a bad value sent through the
    API is caught here); ValueError names the first field that is wrong."""
    for name, component, integer in (("k", page.k, True), ("max_new_tokens", page.max_new, True),
                                     ("temperature", page.temperature, False), ("top_p", page.top_p, False)):
        _within(name, values[component], component, integer)
    return GenerationConfig(
        max_new_tokens=_int(values[page.max_new]), k=_int(values[page.k]),
        adaptive_k=_flag("adaptive_k", values[page.adaptive]), temperature=values[page.temperature],
        top_k=_int(values[page.top_k]), top_p=values[page.top_p], seed=_int(values[page.seed]),
        drafter=values[page.drafter], draft_variant=values[page.draft_variant], target_kernel=values[page.target_kernel],
        runner=values[page.runner], k_policy="cost" if _flag("k_policy cost", values[page.cost_k]) else "fixed",
    ).validate()


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


@dataclass(frozen=True)
class LiveSettings:
    """What a live run was asked for, checked (read_live_settings)."""

    config: GenerationConfig
    compare: bool
    show_rejected: bool
    plain_int4: bool
    pair_name: str
    engine: str
    spec_url: str
    plain_url: str
    can: Capabilities  # what the chosen engine can do


def read_live_settings(page: Page, values: dict, store) -> LiveSettings:
    """The run's settings from the controls; ValueError names the first that is wrong, or one the
    chosen engine cannot honour."""
    config = read_config(page, values)
    compare = _flag("compare", values[page.compare])
    show_rejected = _flag("show_rejected", values[page.show_rejected])
    plain_int4 = _flag("plain_int4", values[page.plain_int4])
    name = store.check_offered(values[page.pair])
    engine, spec_url, plain_url = engine_choice.read_remote(page, values)
    can = choice.capabilities(engine)
    if not can.follows_settings and config.temperature != 0:
        raise ValueError(f"temperature must be 0 for a remote engine (greedy runs only), got {config.temperature}")
    gpu_call.check_offered_here(config, plain_int4)
    if gpu_budget.on_zero_gpu():
        gpu_budget.check_fits(config, compare, gpu_budget.costs_for(gpu_budget.cost_key(name, config)), gpu_budget.call_limit())
    return LiveSettings(config, compare, show_rejected, plain_int4, name, engine, spec_url, plain_url, can)


def live_run(page: Page, values: dict, progress: gr.Progress, session: str | None = None):
    """Stream the speculative run, then (if asked) the plain run with the same settings; yields dicts of updates."""
    stop = values[page.stop]
    stop.clear()
    store = shared_store()
    with ExitStack() as held:
        try:
            s = read_live_settings(page, values, store)
            pair = held.enter_context(store.acquire(s.pair_name, progress=lambda f, msg: progress(f, desc=msg)))
            prompt = values[page.prompt]
            pair.encode_prompt(prompt, chat=pair.chat, max_new_tokens=s.config.max_new_tokens)  # before any GPU time
        except ValueError as err:
            gr.Warning(str(err))
            yield {page.status: f"Not started: {err}"}
            return
        if session:
            _running[session] = stop
            held.callback(_running.pop, session, None)

        view = new_view(pair, s.config, s.show_rejected, prompt, lossy_wanted=s.plain_int4 and s.can.lossy_lane)
        if s.can.in_process:
            lanes = gpu_call.stream_events(pair.name, prompt, s.config, s.compare, s.plain_int4)
        else:  # a real engine's servers: the same lanes, read over HTTP
            view.status = engine_choice.status(s.engine, s.spec_url, s.plain_url, pair, s.compare)
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


def stream_frames(page: Page, view: RunView, stream, stop, *, server_errors: bool):
    """Frames while the lanes arrive, as often as the Throttle allows. A run that does not come to its
    end (Stop, the page went away and Gradio closed this generator, the engine failed) is stopped."""
    throttle, pending, done, first = Throttle(), False, False, True
    try:
        while not done:
            for lane, item in stream.take(timeout=HTML_EVERY_S if pending else 1.0):
                got = receive(view, lane, item, throttle, server_errors)
                done, pending = done or got == "done", pending or got == "new"
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


def receive(view: RunView, lane: str, item, throttle: Throttle, server_errors: bool) -> str | None:
    """Take one item of the stream into the view: "done" when the run is over, "new" when the
    panes have something new to show."""
    if lane == "error" and server_errors and isinstance(item, (EngineError, ValueError)):
        gr.Warning(str(item))  # a server that went away or answered wrongly: one line, the page stays
        view.status += f" \u2014 {item}"
        return "done"
    if lane == "error":
        raise item
    if lane == "done":
        return "done"
    if lane in ("decode_step", "capture"):  # figures the panes do not show
        setattr(view, "one_token_pass_s" if lane == "decode_step" else "capture", item)
        return None
    if lane.endswith("_pending"):  # a remote engine's text before its steps are known
        view.pending.setdefault(lane.removesuffix("_pending"), []).extend(item.text)
        return "new"
    if lane != "spec" and not (view.plain or view.lossy):  # the speculative run has ended:
        throttle.plots_now = True  # its charts, whole, in the next frame
    {"spec": view.spec, "plain": view.plain, "lossy": view.lossy}[lane].append(item)
    return "new"


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
    drafts = f", draft variant {config.draft_variant}" if config.drafter in ("model", "auto") else ""
    return RunView(config=config, dtype_name=pair.dtype_name, show_rejected=show_rejected,
                   status=f"{pair.name} on {pair.device} ({pair.dtype_name}), from {pair.source}, target kernel "
                          f"{config.target_kernel} ({faithfulness_note(pair.name, config.target_kernel)}), "
                          f"{config.runner} runner{drafts}",
                   lossy_wanted=lossy_wanted, prompt=prompt, pair=pair_info(pair), machine=machine_info(pair),
                   created=now_utc())


def last_frame(page: Page, values: dict, view: RunView) -> dict:
    """The finished run, with the theory tab redrawn from it (and kept in the session's theory
    state, when the caller passed one)."""
    out = frame(page, view)
    out.update(theory.after_run(page, values.get(page.theory_state) or theory.TheorySession(), view))
    return out
