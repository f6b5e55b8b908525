"""Step through a run: both handlers pass the request's checks first (app/request.py). "Step" advances the held run (app.step_panel.StepSession) by one step,
"Run to end" drains it and runs plain decoding beside it, a click on a token opens its step.
The held run is one built detailed (OurSource.run(..., detailed=True)): the same events as an uninterrupted run, plus what the panel shows.

The run is held in this process between clicks, so stepping is off on ZeroGPU (each GPU call runs
in a worker there). The pair is taken from the shared store for each call; if the store has
reloaded it since, the held run starts again."""

from __future__ import annotations

from contextlib import ExitStack

import gradio as gr

from specdec.serving import torch_thread
from specdec.core.detail import explain
from specdec.engines.ours import OurSource
from specdec.measure.passcost import time_decode_step

from . import live, step_panel
from .lanes import Lane
from .render import render_status
from .request import Admitted, admitted, refusal
from .settings import STEP
from .view import frame


def _key(request: Admitted) -> tuple:
    return (request.pair.name, request.prompt, request.config)


def _start(page, values: dict, session, request: Admitted) -> None:
    """A new held run with the request's settings, from its prompt ids (ValueError names a bad setting)."""
    # On the torch thread: building the run builds its draft variant too (torch_thread says why).
    source = OurSource(request.pair, request.config, stop=values[page.stop])
    decoding = torch_thread.call(lambda: source.decode(request.prompt_ids, detailed=True))
    session.close()
    session.decoding, session.events = decoding, iter(decoding)
    session.view = live.new_view(request.pair, request.config, request.settings.show_rejected, request.prompt)
    session.pair, session.prompt_ids, session.key = request.pair, request.prompt_ids, _key(request)


def _held(session, request: Admitted, ended_is_over: bool = True) -> bool:
    """The held run can go on: same settings, same loaded pair, and (ended_is_over) not ended."""
    return (session.events is not None and session.pair is request.pair and session.key == _key(request)
            and not (session.ended and ended_is_over))


def step(page, values: dict, progress: gr.Progress) -> dict:
    """One speculative step; a new run when none is held, the last one ended, or the settings changed."""
    session = values[page.step_state]
    with session.lock:
        try:
            with admitted(page, values, progress, STEP) as request:
                if not _held(session, request):
                    _start(page, values, session, request)
                values[page.stop].clear()
                event = torch_thread.call(next, session.events, None)  # one step, on the torch thread
        except ValueError as err:
            return {page.status: render_status(refusal(err))}
        view = session.view
        if event is None:  # stopped, or nothing left
            session.ended = True
            return {page.status: render_status(f"The run has ended: Step starts a new one \u2014 {view.status}", view.status_details)}
        view.spec.append(event)
        session.ended = event.finish is not None
        out = frame(page, view)
        note = ("the speculative run is complete: Run to end adds plain decoding" if session.ended
                else "Step for the next step, Run to end to finish")
        # The step first: the line is cut with an ellipsis where the window is narrow, and this changes every step.
        out[page.status] = render_status(f"Stepping: step {event.step} ({note}) \u2014 {view.status}", view.status_details)
        out[page.step_panel] = step_panel.render_panel(explain(event, session.decoding.details[event.step]))
        return out


def run_to_end(page, values: dict, progress: gr.Progress):
    """Finish the held run (or a new one, recorded), then plain decoding and the comparison: the
    lanes of a live run, streamed by the same loop (live.stream_frames), throttled alike."""
    session = values[page.step_state]
    with session.lock, ExitStack() as held:
        try:
            request = held.enter_context(admitted(page, values, progress, STEP))
            finished = session.view is not None and session.view.finished
            if finished or not _held(session, request, ended_is_over=False):
                _start(page, values, session, request)
        except ValueError as err:
            yield {page.status: render_status(refusal(err))}
            return
        stop, view = values[page.stop], session.view
        stop.clear()
        ours = OurSource(request.pair, request.config, stop=stop)
        lanes = _rest_of_run(session, ours, request.settings.compare, stepped=bool(view.spec))
        stream = torch_thread.Stream(lanes, stop)
        held.callback(stream.join)  # before the pair is released: the engine may be inside a step
        yield from live.stream_frames(page, view, stream, stop)
        session.ended = True
        view.finished, view.stopped = True, stop.is_set()
        yield live.last_frame(page, values, view)


def _rest_of_run(session, ours: OurSource, compare: bool, stepped: bool):
    """On the torch thread: the held run's remaining steps, then plain decoding (nothing drafted)
    or, without it, one decode step timed on the finished run (the unit of c and the verify cost)."""
    for event in session.events:
        stepped = True
        yield Lane.SPEC, event
    if compare:
        for event in ours.plain().decode(session.prompt_ids):
            yield Lane.PLAIN, event
    elif stepped:
        yield Lane.DECODE_STEP, time_decode_step(session.decoding)


def open_token(page, values: dict, evt: gr.EventData) -> dict:
    """A token was clicked: explain its step, with the recorded detail when it is the held run."""
    events = values[page.spec_events] or []
    try:
        index = int(evt.step)
    except (AttributeError, TypeError, ValueError):
        return {}
    if not 0 <= index < len(events):
        return {}
    detail = values[page.step_state].detail(index, events)
    return {page.step_panel: step_panel.render_panel(explain(events[index], detail))}
