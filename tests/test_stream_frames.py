"""One streaming loop (app.live.stream_frames) for the page: the lanes of a live run and of Run to
end of a stepped run go through it, throttled alike. Lanes are app.lanes.Lane members, each filling
its part of the view; a lane the page does not know stops the run with an error."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app import live, stepping
from app.page import StopFlag
from app.step_panel import StepSession
from app.theory import TheorySession
from app.lanes import Lane
from app.view import RunView
from specdec.core.config import GenerationConfig
from specdec.engines.vllm import PendingText
from tests.support.runs import run_checked, tokens
from tests.support.live import no_progress, status_line
from tests.support.live import settings as live_settings

pytestmark = pytest.mark.usefixtures("fp32_store")  # tests/conftest.py

PROMPT = "def add(a, b):"


def settings(page, **overrides) -> dict:
    """test_live's settings for 32 tokens, with the step panel's and the Theory tab's states."""
    return live_settings(page, **{"max_new": 32, "step_state": StepSession(), "theory_state": TheorySession(), **overrides})


class Arrived:
    """A stream whose items have all arrived, taken as torch_thread.Stream.take gives them."""

    def __init__(self, items):
        self.items = list(items)

    def take(self, timeout: float) -> list:
        items, self.items = self.items, []
        return items


def test_each_lane_fills_its_part_of_the_view(page, tiny_pair):
    config = GenerationConfig(max_new_tokens=12, k=3)
    spec = run_checked(tiny_pair, PROMPT, config)
    plain = run_checked(tiny_pair, PROMPT, replace(config, drafter="none"))
    pending = PendingText((5,), ("<b>",), 1, 0.1)
    items = [("spec_pending", pending), *((Lane.SPEC, e) for e in spec), (Lane.PLAIN_PENDING, pending),
             *(("plain", e) for e in plain), (Lane.LOSSY, plain[0]), ("decode_step", 0.25), (Lane.CAPTURE, 1.5), ("done", None)]
    view, stop = RunView(config=config, dtype_name="fp32"), StopFlag()
    frames = list(live.stream_frames(page, view, Arrived(items), stop))
    assert view.spec == spec and view.plain == plain and view.lossy == plain[:1]
    assert view.pending == {Lane.SPEC: ["<b>"], Lane.PLAIN: ["<b>"]} and view.pending["spec"] == ["<b>"]  # a Lane is its string
    assert view.decode_step_s == 0.25 and view.capture == 1.5
    assert frames == [] and not stop.is_set()  # it all came with its end: the caller draws the finished run; not stopped


def test_a_lane_the_page_does_not_know_stops_the_run(page):
    stop = StopFlag()
    with pytest.raises(ValueError, match="'sideways' is not a valid Lane"):
        list(live.stream_frames(page, RunView(config=GenerationConfig(), dtype_name="fp32"), Arrived([("sideways", 1)]), stop))
    assert stop.is_set()


def test_run_to_end_finishes_a_stepped_run_through_the_live_loop(page, monkeypatch, tiny_pair):
    measured = []  # the plots flag of every frame the throttle was told the cost of

    class Measuring(live.Throttle):
        def spent(self, seconds: float, plots: bool) -> None:
            measured.append(plots)
            super().spent(seconds, plots)

    loops = []
    real_loop = live.stream_frames

    def counted_loop(*args, **kwargs):
        loops.append(args[2])  # the stream it reads
        yield from real_loop(*args, **kwargs)

    monkeypatch.setattr(live, "Throttle", Measuring)
    monkeypatch.setattr(live, "stream_frames", counted_loop)
    values = settings(page)
    for _ in range(2):
        out = stepping.step(page, values, no_progress)
    assert status_line(out[page.status]).startswith("Stepping: step 1 (")
    frames = list(stepping.run_to_end(page, values, no_progress))
    last = frames[-1][page.run_view]
    config = GenerationConfig(max_new_tokens=32, k=4, draft_variant="dense")
    assert tokens(last.spec) == tokens(run_checked(tiny_pair, PROMPT, config))  # two steps, then the rest: one run
    assert tokens(last.plain) == tokens(run_checked(tiny_pair, PROMPT, replace(config, drafter="none")))
    assert last.finished and not last.stopped and "identical to plain decoding" in frames[-1][page.stats]
    streaming = frames[:-1]
    assert len(loops) == 1 and len(measured) == len(streaming) >= 1  # one loop, and the throttle timed each frame
    assert page.status in streaming[0] and not any(page.run_view in f for f in streaming[1:])  # the live loop's frames


def test_run_to_end_without_plain_decoding_times_one_decode_step(page):
    values = settings(page, compare=False, max_new=16)
    stepping.step(page, values, no_progress)
    last = list(stepping.run_to_end(page, values, no_progress))[-1][page.run_view]
    assert not last.plain and last.decode_step_s is not None and last.decode_step_s > 0
