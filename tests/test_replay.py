"""Replay: both runs on one clock from their recorded elapsed seconds (specdec.record.replay), and the app's
replay handler, which must show at every frame exactly the events whose time has passed."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr
import pytest

from app.render import render_spans
from specdec.record import replay
from specdec.core.events import BONUS, CORRECTION, PLAIN
from tests.support.events import make_events
from tests.support.live import status_line

SPEC_TIMES = [0.5, 1.0, 1.8, 2.0, 3.1]
PLAIN_TIMES = [0.3, 0.6, 0.9, 1.2, 1.5, 1.8, 2.1, 2.4, 2.7, 3.0, 3.3, 3.6]


def timed(events, times):
    return [replace(e, elapsed_s=t) for e, t in zip(events, times, strict=True)]


SPEC = timed(make_events([(["a", "b", "c"], 1, "X", CORRECTION), (["d", "e"], 2, "Y", BONUS), (["f"], 0, "Z", CORRECTION),
                          (["g", "h"], 2, "W", BONUS), (["i", "j"], 1, "V", CORRECTION)]), SPEC_TIMES)
PLAIN_RUN = timed(make_events([([], 0, f"p{i}", PLAIN) for i in range(len(PLAIN_TIMES))]), PLAIN_TIMES)


def passed(times, t):
    return sum(1 for x in times if x <= t)


def test_at_time_shows_the_events_whose_time_has_passed_in_both_runs():
    for i in range(0, 400):
        t = i * 0.01
        pos = replay.at_time(SPEC, PLAIN_RUN, t)
        assert (pos.spec, pos.plain) == (passed(SPEC_TIMES, t), passed(PLAIN_TIMES, t)), t
    assert replay.at_time(SPEC, PLAIN_RUN, 1.8) == replay.Position(1.8, 3, 6)  # an event is shown at its own time
    assert replay.duration(SPEC, PLAIN_RUN) == 3.6
    assert replay.duration(SPEC, []) == 3.1 and replay.duration([], []) == 0.0


def test_scrubbing_to_step_n_shows_exactly_n_steps_and_the_plain_run_then():
    for n in range(len(SPEC) + 1):
        pos = replay.at_step(SPEC, PLAIN_RUN, n)
        assert pos.spec == n
        assert pos.t == (SPEC_TIMES[n - 1] if n else 0.0)
        assert pos.plain == passed(PLAIN_TIMES, pos.t)
    assert replay.at_step(SPEC, PLAIN_RUN, 99).spec == len(SPEC)  # clamped to the run
    assert replay.at_step(SPEC, PLAIN_RUN, -1).spec == 0


def test_next_change_is_the_next_event_of_either_run():
    assert replay.next_change(SPEC, PLAIN_RUN, 0.0) == 0.3
    assert replay.next_change(SPEC, PLAIN_RUN, 0.3) == 0.5
    assert replay.next_change(SPEC, PLAIN_RUN, 3.1) == 3.3
    assert replay.next_change(SPEC, PLAIN_RUN, 3.6) is None


def test_the_clock_runs_at_its_speed_and_a_new_speed_does_not_jump():
    clock = replay.Clock(t0=1.0, wall0=100.0, speed=2.0)
    assert clock.at(101.5) == 4.0 and clock.wall_of(4.0) == 101.5
    faster = clock.with_speed(101.5, 0.25)
    assert faster.at(101.5) == 4.0 and faster.at(105.5) == 5.0
    with pytest.raises(ValueError, match="replay speed must be one of 0.25x, 0.5x, 1x, 2x"):
        replay.Clock(0.0, 0.0, 3.0)


# --- the app's handler ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def page():
    from app.page import build_page

    with gr.Blocks():
        return build_page("tiny-random")


def finished_view():
    from app.view import RunView
    from specdec.core.config import GenerationConfig

    return RunView(config=GenerationConfig(k=3), dtype_name="fp32", spec=list(SPEC), plain=list(PLAIN_RUN), finished=True,
                   status="tiny-random")


class FakeTime:
    """time.monotonic and time.sleep for the replay handler: sleeping moves the clock, instantly."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.now += seconds


@pytest.mark.parametrize("speed", [0.25, 1.0, 2.0])
def test_each_replay_frame_shows_the_events_whose_recorded_time_has_passed(page, monkeypatch, speed):
    from app import replay as app_replay

    fake = FakeTime()
    monkeypatch.setattr(app_replay, "time", fake)
    view, control = finished_view(), app_replay.ReplayControl()
    values = {page.run_view: view, page.replay_control: control, page.replay_speed: speed}
    start, drawn = fake.now, 0
    for out in app_replay.play(page, values):
        t = min((fake.now - start) * speed, 3.6)  # replay time of this frame (the clock stops at the end)
        n_spec, n_plain = passed(SPEC_TIMES, t), passed(PLAIN_TIMES, t)
        if page.spec_html in out:
            drawn += 1
            assert out[page.spec_html] == render_spans(SPEC[:n_spec]), t
            assert out[page.plain_html] == (render_spans(PLAIN_RUN[:n_plain], False) if n_plain else out[page.plain_html])
            assert out[page.replay_step] == n_spec
        assert status_line(out[page.status]).startswith(f"Replay at {speed:g}x: {t:.1f} s of 3.6 s")
    assert drawn >= len(set(SPEC_TIMES) | set(PLAIN_TIMES))  # a frame for every moment something happened
    # The replay took the recorded time, scaled (within one frame).
    assert 3.6 <= (fake.now - start) * speed <= 3.6 + app_replay.MIN_FRAME_S * speed
    assert page.stats in out and "identical to plain decoding" not in out[page.stats]  # different texts: no badge claim
    assert control.position == replay.Position(3.6, len(SPEC), len(PLAIN_RUN))


def test_pause_ends_a_replay_and_the_next_one_resumes_where_it_stopped(page, monkeypatch):
    from app import replay as app_replay

    fake = FakeTime()
    monkeypatch.setattr(app_replay, "time", fake)
    view, control = finished_view(), app_replay.ReplayControl()
    values = {page.run_view: view, page.replay_control: control, page.replay_speed: 1.0}
    frames = app_replay.play(page, values)
    for out in frames:
        if control.position.t >= 1.0:
            app_replay.pause(control)
    assert 1.0 <= control.position.t < 1.3
    resumed = next(app_replay.play(page, values))
    assert resumed[page.replay_step] == control.position.spec == passed(SPEC_TIMES, control.position.t)


def test_scrub_shows_exactly_n_steps_and_stops_a_replay(page):
    from app import replay as app_replay

    view, control = finished_view(), app_replay.ReplayControl()
    token = control.begin(replay.Clock(0.0, 0.0, 1.0))
    for n in range(len(SPEC) + 1):
        out = app_replay.scrub(page, {page.run_view: view, page.replay_control: control, page.replay_step: n})
        assert not control.is_playing(token)
        assert out[page.spec_html] == render_spans(SPEC[:n])
        t = SPEC_TIMES[n - 1] if n else 0.0
        shown_plain = passed(PLAIN_TIMES, t)
        if shown_plain:
            assert out[page.plain_html] == render_spans(PLAIN_RUN[:shown_plain], False)
        assert f"step {n} of {len(SPEC)} speculative" in status_line(out[page.status])
        assert not set(out) & set(page.run_states())  # a replay frame never replaces the run it replays


def test_nothing_to_replay_is_a_warning_not_an_error(page):
    from app import replay as app_replay

    with pytest.warns(UserWarning, match="Nothing to replay"):
        assert list(app_replay.play(page, {page.run_view: None, page.replay_control: app_replay.ReplayControl(),
                                           page.replay_speed: 1.0})) == []
