"""A live run: read the settings, stream the speculative run then the plain run, one frame at a time.

The GPU work is `stream_events`, a generator with plain arguments and results: on a ZeroGPU Space
`spaces.GPU` runs it in a worker process (arguments and events are pickled across), asking for a
duration computed from the request. Everything that touches the page stays in `live_run`, which
reads the events, ends the run between two steps when Stop is pressed or the visitor leaves
(closing the stream ends the worker's generator too), and frees the pair only when it is done.
"""

from __future__ import annotations

import math
import time
from contextlib import ExitStack, closing
from dataclasses import replace

import gradio as gr

from specdec import gpu_budget
from specdec.config import GenerationConfig
from specdec.engine import generate
from specdec.pairs import shared_store
from specdec.passcost import one_token_pass_s
from specdec.run import plain_int4_run
from specdec.record import machine_info, now_utc, pair_info

from . import theory
from .layout import Page, StopFlag
from .view import RunView, frame

HTML_EVERY_S = 0.1  # redraw the token panes at most this often (every step on a CPU)
PLOT_EVERY_S = 0.3  # plots are heavier for the browser: redraw less often

try:  # on a ZeroGPU Space, GPU work must run inside spaces.GPU (a no-op elsewhere)
    import spaces
except ImportError:
    spaces = None


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
        drafter=values[page.drafter], draft_variant=values[page.draft_variant],
        pause_unprofitable=_flag("pause_unprofitable", values[page.pause]),
    ).validate()


def gpu_seconds(pair_name: str, prompt: str, config: GenerationConfig, compare: bool, plain_int4: bool = False) -> int:
    """The duration ZeroGPU is asked for: the longest this run can take (same arguments as stream_events;
    the lossy lane counted as one more plain run, which it is faster than)."""
    costs = gpu_budget.costs_for(pair_name)
    seconds = gpu_budget.call_seconds(config, compare, costs)
    if plain_int4:
        seconds += gpu_budget.call_seconds(config, True, costs) - gpu_budget.call_seconds(config, False, costs)
    return math.ceil(seconds)


def _on_gpu(fn):
    return spaces.GPU(duration=gpu_seconds)(fn) if spaces is not None else fn


@_on_gpu
def stream_events(pair_name: str, prompt: str, config: GenerationConfig, compare: bool, plain_int4: bool = False):
    """("spec", StepEvent) for each step of the speculative run, then ("plain", StepEvent) for the
    plain run with the same settings (without it, ("decode_step", seconds): one plain decode step
    timed on the finished run's cache, the unit of c and the verify cost), then ("lossy", StepEvent)
    for plain decoding with an int4 copy of the target (built once per pair, cached on disk). The
    pair is already loaded (in this process, or in the one a ZeroGPU worker was forked from)."""
    pair = shared_store().get(pair_name)
    decoding = generate(pair, prompt, config)
    for event in decoding:
        yield "spec", event
    if compare:
        for event in generate(pair, prompt, replace(config, drafter="none")):  # the baseline: nothing drafted
            yield "plain", event
    else:
        yield "decode_step", one_token_pass_s(decoding)
    if plain_int4:
        for event in plain_int4_run(pair, prompt, config):
            yield "lossy", event


_running: dict[str, StopFlag] = {}  # session -> the stop flag of its run in flight


def stop_session(session_hash: str | None) -> None:
    """The visitor left (tab closed): their run ends before its next step."""
    flag = _running.get(session_hash or "")
    if flag is not None:
        flag.set()


class Throttle:
    """Says when a frame is due: token panes at most every HTML_EVERY_S, plots every PLOT_EVERY_S."""

    def __init__(self):
        self.last_html = self.last_plot = 0.0

    def due(self) -> tuple[bool, bool]:
        now = time.monotonic()
        if now - self.last_html < HTML_EVERY_S:
            return False, False
        self.last_html = now
        plots = now - self.last_plot >= PLOT_EVERY_S
        if plots:
            self.last_plot = now
        return True, plots


def live_run(page: Page, values: dict, progress: gr.Progress, session: str | None = None):
    """Stream the speculative run, then (if asked) the plain run with the same settings; yields dicts of updates."""
    stop = values[page.stop]
    stop.clear()
    store = shared_store()
    with ExitStack() as held:
        try:
            config = read_config(page, values)
            compare = _flag("compare", values[page.compare])
            show_rejected = _flag("show_rejected", values[page.show_rejected])
            plain_int4 = _flag("plain_int4", values[page.plain_int4])
            name = store.check_offered(values[page.pair])
            if gpu_budget.on_zero_gpu():
                gpu_budget.check_fits(config, compare, gpu_budget.costs_for(name), gpu_budget.call_limit())
            pair = held.enter_context(store.acquire(name, progress=lambda f, msg: progress(f, desc=msg)))
            prompt = values[page.prompt]
            pair.encode_prompt(prompt, chat=pair.chat, max_new_tokens=config.max_new_tokens)  # before any GPU time
        except ValueError as err:
            gr.Warning(str(err))
            yield {page.status: f"Not started: {err}"}
            return
        if session:
            _running[session] = stop
            held.callback(_running.pop, session, None)

        view = new_view(pair, config, show_rejected, prompt, lossy_wanted=plain_int4)
        throttle = Throttle()
        stream = held.enter_context(closing(stream_events(pair.name, prompt, config, compare, plain_int4)))
        for which, event in stream:
            if which == "decode_step":
                view.one_token_pass_s = event
                continue
            {"spec": view.spec, "plain": view.plain, "lossy": view.lossy}[which].append(event)
            if stop.is_set():  # checked after every step: Stop, or the visitor's tab closed
                break
            html, plots = throttle.due()
            if html:
                yield frame(page, view, plots=plots)
        view.finished, view.stopped = True, stop.is_set()
        if not view.stopped:
            gpu_budget.record(pair.name, config, view.spec, view.plain)
        yield last_frame(page, values, view)


def new_view(pair, config: GenerationConfig, show_rejected: bool, prompt: str, lossy_wanted: bool = False) -> RunView:
    drafts = f", draft variant {config.draft_variant}" if config.drafter in ("model", "auto") else ""
    return RunView(config=config, dtype_name=pair.dtype_name, show_rejected=show_rejected, pair_name=pair.name,
                   status=f"{pair.name} on {pair.device} ({pair.dtype_name}), from {pair.source}{drafts}",
                   lossy_wanted=lossy_wanted, prompt=prompt, pair=pair_info(pair), machine=machine_info(pair),
                   created=now_utc())


def last_frame(page: Page, values: dict, view: RunView) -> dict:
    """The finished run, with the theory tab redrawn from it (and kept in the session's theory
    state, when the caller passed one)."""
    out = frame(page, view)
    out.update(theory.after_run(page, values.get(page.theory_state) or theory.TheorySession(), view))
    return out
