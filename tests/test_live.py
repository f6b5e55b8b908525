"""app.live: a live run on tiny-random, driven as Gradio drives it: both runs run on the process's
torch thread, the frames show what they produced, and closing the page stops them."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from app import live
from specdec.engines import ours
from app.render import render_spans
from app.settings import read_config
from specdec.serving import pairs
from specdec.serving import torch_thread
from specdec.core.config import GenerationConfig
from tests.support.live import no_progress, settings
from tests.support.runs import run_checked, tokens

pytestmark = pytest.mark.usefixtures("fp32_store")  # tests/conftest.py


def test_a_live_run_ends_with_both_runs_whole_and_every_step_ran_in_one_engine_thread(page, monkeypatch, tiny_pair):
    threads = []
    real_build = ours.build_decoding

    class Recording:  # the run as build_decoding gives it (its runner read after the run), each step's thread noted
        def __init__(self, decoding):
            self.decoding, self.runner = decoding, decoding.runner

        def __iter__(self):
            for event in self.decoding:
                threads.append(threading.get_ident())
                yield event

    def recording_build(*args, **kwargs):
        return Recording(real_build(*args, **kwargs))

    monkeypatch.setattr(ours, "build_decoding", recording_build)
    frames = list(live.live_run(page, settings(page), no_progress))
    monkeypatch.undo()  # the runs below, made here to compare, are not the page's
    last = frames[-1][page.run_view]
    config = GenerationConfig(max_new_tokens=48, k=4, draft_variant="dense")
    assert tokens(last.spec) == tokens(run_checked(tiny_pair, "def add(a, b):", config))
    assert tokens(last.plain) == tokens(run_checked(tiny_pair, "def add(a, b):", replace(config, drafter="none")))
    assert last.finished and not last.stopped
    assert frames[-1][page.spec_html] == render_spans(last.spec)
    assert "identical to plain decoding" in frames[-1][page.stats]
    assert len(threads) == len(last.spec) + len(last.plain)
    assert len(set(threads)) == 1 and threads[0] != threading.get_ident()  # one thread, not the page's:
    assert torch_thread.call(threading.get_ident) == threads[0]  # the torch thread


def test_the_runner_chosen_on_the_page_runs_and_is_named(page, tiny_pair):
    frames = list(live.live_run(page, settings(page, runner="static", max_new=16), no_progress))
    last = frames[-1][page.run_view]
    assert last.config.runner == "static" and "static runner" in last.status
    config = GenerationConfig(max_new_tokens=16, k=4)
    assert tokens(last.spec) == tokens(run_checked(tiny_pair, "def add(a, b):", config))
    with pytest.raises(ValueError, match="runner must be one of eager, static, compiled"):
        read_config(page, settings(page, runner="fast"))


def test_stop_ends_the_run_between_two_steps(page):
    values = settings(page, max_new=1024)
    frames = live.live_run(page, values, no_progress)
    first = next(frames)
    assert first[page.spec_html]
    values[page.stop].set()
    last = list(frames)[-1][page.run_view]
    assert last.stopped and len(tokens(last.spec)) < 1024 and not last.plain


def test_closing_the_page_stops_the_engine_before_the_pair_is_released(page):
    values = settings(page, max_new=1024)
    frames = live.live_run(page, values, no_progress)
    next(frames)
    frames.close()  # what Gradio does when the browser goes away
    assert values[page.stop].is_set()
    assert pairs.shared_store()._in_use["tiny-random"] == 0  # the run let go of the pair...
    assert torch_thread.submit(lambda: True).result(timeout=1)  # ...after the torch thread had left it


def test_an_engine_error_reaches_the_page(page, monkeypatch):
    def failing(*args, **kwargs):
        yield from ()
        raise RuntimeError("out of memory")

    monkeypatch.setattr(ours, "build_decoding", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        list(live.live_run(page, settings(page), no_progress))


def test_the_k_policy_checkboxes_ask_for_k_policy_by_name(page):
    assert read_config(page, settings(page)).k_policy == "fixed"
    assert read_config(page, settings(page, adaptive=True)).k_policy == "adaptive"
    assert read_config(page, settings(page, cost_k=True)).k_policy == "cost"
    with pytest.raises(ValueError, match="k_policy adaptive and k_policy cost exclude each other: choose one k_policy"):
        read_config(page, settings(page, adaptive=True, cost_k=True))
