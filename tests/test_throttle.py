"""app.live.Throttle: frames keep to a budget of the run's time, measured from what they cost."""

from __future__ import annotations

import pytest

from app import live


class Clock:
    def __init__(self):
        self.now = 100.0

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(live, "time", c)
    return c


def test_first_frame_at_once_then_no_more_often_than_the_minimum(clock):
    t = live.Throttle()
    assert t.due() == (True, True)
    clock.now += live.HTML_EVERY_S / 2
    assert t.due() == (False, False)
    clock.now += live.HTML_EVERY_S
    assert t.due() == (True, False)  # panes again; the plots wait for their own interval
    clock.now += live.PLOT_EVERY_S
    assert t.due() == (True, True)


def test_an_expensive_frame_pushes_the_next_one_out_to_the_budget(clock):
    t = live.Throttle()
    assert t.due() == (True, True)
    t.spent(0.1, plots=True)  # three figures took 100 ms: next plots only after 0.1 / BUDGET seconds
    wait = 0.1 / live.BUDGET
    plots_at, step = [], live.HTML_EVERY_S * 1.001  # one engine step per pane interval
    for _ in range(int(2 * wait / step) + 2):
        clock.now += step
        html, plots = t.due()
        assert html  # cheap pane frames keep coming every step
        if plots:
            plots_at.append(clock.now)
    assert plots_at and plots_at[0] - 100.0 >= wait - 1e-9
    # Over the whole stretch, plot frames took at most BUDGET of the time.
    assert len(plots_at) * 0.1 <= live.BUDGET * (clock.now - 100.0) + 0.1


def test_pane_frames_keep_to_the_budget_too(clock):
    t = live.Throttle()
    t.due()
    t.spent(0.01, plots=False)  # a pane frame that cost 10 ms
    clock.now += max(live.HTML_EVERY_S, 0.01 / live.BUDGET) - 1e-3
    assert t.due() == (False, False)
    clock.now += 2e-3
    assert t.due()[0]
