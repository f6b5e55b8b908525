"""Replay: play the run on screen back, both runs racing on one clock (specdec.record.replay), at
0.25x to 2x real time; pause; scrub to any step of the speculative run.

A replay is one streaming handler that sleeps until the next recorded event is due and then sends
a frame drawn by app.view.frame, the function that drew the live run. It needs no model.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import gradio as gr

from specdec.record import replay as clock
from specdec.record.replay import Clock, Position

from . import render
from .components import Page
from .view import RunView, frame

MIN_FRAME_S = 0.05  # at most 20 frames a second, however dense the recorded events are
STATUS_EVERY_S = 0.25  # the replay clock in the status line ticks this often between events
PLOT_EVERY_S = 0.3  # the figures are the heavy part of a frame: redraw them this often


class ReplayControl:
    """Per session: which replay is playing (a newer one, Pause or a scrub ends the older), its
    clock, and where it stopped. gr.State deep-copies its initial value; a copy is a fresh one."""

    def __init__(self):
        self.lock = threading.Lock()
        self.playing: object | None = None  # a token held by the replay now playing
        self.clock: Clock | None = None
        self.position: Position | None = None  # where the last replay or scrub left off

    def __deepcopy__(self, memo):
        return ReplayControl()

    def begin(self, new_clock: Clock) -> object:
        with self.lock:
            self.playing, self.clock = object(), new_clock
            return self.playing

    def halt(self) -> None:
        with self.lock:
            self.playing = None

    def is_playing(self, token: object) -> bool:
        return self.playing is token


def _at(page: Page, view: RunView, pos: Position, status: str, *, plots: bool) -> dict:
    """The frame of `view` at `pos`: the same drawing as a live frame, of the steps shown by then."""
    done = pos.spec == len(view.spec) and pos.plain == len(view.plain)
    part = replace(view, spec=view.spec[: pos.spec], plain=view.plain[: pos.plain], finished=done,
                   stopped=view.stopped and done, status=status,
                   lossy=view.lossy if done else [])  # the lossy lane ran after both: it is not on the clock
    out = {k: v for k, v in frame(page, part, plots=plots).items() if k not in page.run_states()}
    out[page.replay_step] = pos.spec
    return out


def _status(view: RunView, pos: Position, speed: float | None) -> str:
    total = clock.duration(view.spec, view.plain)
    how = f"Replay at {speed:g}x" if speed else "Paused"
    plain = f", plain {pos.plain} of {len(view.plain)}" if view.plain else ""
    return (f"{how}: {pos.t:.1f} s of {total:.1f} s recorded \u00b7 step {pos.spec} of {len(view.spec)} "
            f"speculative{plain} \u2014 {view.status}")


def _ready(view: RunView | None) -> bool:
    if view is None or not view.spec:
        gr.Warning("Nothing to replay yet: generate a run or load one from a file.")
        return False
    if not view.finished:
        gr.Warning("Wait for the run to finish (or stop it), then replay it.")
        return False
    return True


def play(page: Page, values: dict):
    """Stream the replay from where it stopped (or from the start), at the chosen speed."""
    view, control = values[page.run_view], values[page.replay_control]
    if not _ready(view):
        return
    total = clock.duration(view.spec, view.plain)
    start = control.position.t if control.position and control.position.t < total else 0.0
    token = control.begin(Clock(start, time.monotonic(), float(values[page.replay_speed])))
    shown, last_plot, last_frame = None, 0.0, 0.0
    while control.is_playing(token):
        now = time.monotonic()
        ticking = control.clock
        t = min(ticking.at(now), total)
        pos = clock.at_time(view.spec, view.plain, t)
        control.position = pos
        status = _status(view, pos, ticking.speed)
        if (pos.spec, pos.plain) != shown or t >= total:
            plots = t >= total or now - last_plot >= PLOT_EVERY_S
            last_plot = now if plots else last_plot
            yield _at(page, view, pos, status, plots=plots)
            shown = (pos.spec, pos.plain)
        else:
            yield {page.status: render.render_status(status, view.status_details)}  # only the clock moved
        last_frame = now
        if t >= total:
            break
        # Sleep until the next recorded event is due, but wake for the status tick and for Pause.
        due = clock.next_change(view.spec, view.plain, t)
        wake = min(ticking.wall_of(due) if due is not None else now, now + STATUS_EVERY_S)
        time.sleep(max(wake - time.monotonic(), last_frame + MIN_FRAME_S - time.monotonic(), 0.0))
    control.halt()


def pause(control: ReplayControl) -> None:
    control.halt()


def set_speed(control: ReplayControl, speed: float) -> None:
    """A new speed takes effect at once in a replay that is playing (the next one reads the radio)."""
    with control.lock:
        if control.clock is not None and control.playing is not None:
            control.clock = control.clock.with_speed(time.monotonic(), float(speed))


def scrub(page: Page, values: dict) -> dict:
    """Show exactly n steps of the speculative run and the plain run as it stood then; pauses a replay."""
    view, control = values[page.run_view], values[page.replay_control]
    if not _ready(view):
        return {}
    control.halt()
    pos = clock.at_step(view.spec, view.plain, int(values[page.replay_step]))
    control.position = pos
    return _at(page, view, pos, _status(view, pos, None), plots=True)


def rewind(page: Page, values: dict) -> dict:
    """A new run is on screen: the slider spans its steps, the next replay starts from the beginning."""
    view, control = values[page.run_view], values[page.replay_control]
    control.halt()
    control.position = None
    n = len(view.spec) if view is not None else 0
    return {page.replay_step: gr.update(maximum=max(n, 1), value=n)}
