"""A live run: read the settings, stream the speculative run then the plain run, one frame at a time."""

from __future__ import annotations

import time
from dataclasses import replace

import gradio as gr

from specdec.config import GenerationConfig
from specdec.engine import generate
from specdec.models import load_pair

from .layout import Page
from .view import RunView, frame

HTML_EVERY_S = 0.1  # redraw the token panes at most this often (every step on a CPU)
PLOT_EVERY_S = 0.3  # plots are heavier for the browser: redraw less often

try:  # on a ZeroGPU Space, GPU work must run inside spaces.GPU
    import spaces

    gpu = spaces.GPU
except ImportError:

    def gpu(fn):
        return fn


def _int(value):
    """Sliders and number boxes send floats; keep non-integers as they are so validation names the field."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def read_config(page: Page, values: dict) -> GenerationConfig:
    """The run's settings from the controls; ValueError names the first field out of range."""
    return GenerationConfig(
        max_new_tokens=_int(values[page.max_new]), k=_int(values[page.k]), adaptive_k=bool(values[page.adaptive]),
        temperature=values[page.temperature], top_k=_int(values[page.top_k]), top_p=values[page.top_p],
        seed=_int(values[page.seed]), drafter=values[page.drafter],
    ).validate()


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


def live_run(page: Page, values: dict, progress: gr.Progress):
    """Stream the speculative run, then (if asked) the plain run with the same settings; yields dicts of updates."""
    stop = values[page.stop]
    stop.clear()
    try:
        config = read_config(page, values)
        pair = load_pair(values[page.pair], progress=lambda f, msg: progress(f, desc=msg))
        spec_stream = generate(pair, values[page.prompt], config, stop=stop)  # validates the prompt before the first step
    except ValueError as err:
        gr.Warning(str(err))
        yield {page.status: f"Not started: {err}"}
        return

    view = RunView(config=config, dtype_name=pair.dtype_name, show_rejected=bool(values[page.show_rejected]),
                   status=f"{pair.name} on {pair.device} ({pair.dtype_name}), from {pair.source}")
    throttle = Throttle()
    for event in spec_stream:
        view.spec.append(event)
        html, plots = throttle.due()
        if html:
            yield frame(page, view, plots=plots)
    if values[page.compare] and not stop.is_set():
        # The baseline: the same settings and target, nothing drafted.
        for event in generate(pair, values[page.prompt], replace(config, drafter="none"), stop=stop):
            view.plain.append(event)
            html, plots = throttle.due()
            if html:
                yield frame(page, view, plots=plots)
    view.finished, view.stopped = True, stop.is_set()
    yield frame(page, view)


live_run_on_gpu = gpu(live_run)
