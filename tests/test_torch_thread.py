"""specdec.serving.torch_thread: heavy torch work from any thread runs on one thread, so the process keeps a
single OpenMP team (a second one makes every small op pay a wake-up; docs/app_speed.md)."""

from __future__ import annotations

import threading

import pytest
import torch

from specdec.serving import torch_thread


def test_call_runs_on_one_thread_whoever_calls():
    seen = []
    callers = [threading.Thread(target=lambda: seen.append(torch_thread.call(threading.get_ident))) for _ in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    seen.append(torch_thread.call(threading.get_ident))
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()


def test_call_from_the_torch_thread_runs_in_place_and_exceptions_come_back():
    assert torch_thread.call(lambda: torch_thread.call(lambda: torch_thread.on_torch_thread()))  # no deadlock
    with pytest.raises(ValueError, match="bad prompt"):
        torch_thread.call(lambda: (_ for _ in ()).throw(ValueError("bad prompt")))


def test_iterate_produces_each_item_on_the_torch_thread():
    def items():
        for i in range(3):
            yield i, threading.get_ident(), torch.ones(4).sum().item()

    got = list(torch_thread.iterate(items()))
    assert [g[0] for g in got] == [0, 1, 2]
    assert {g[1] for g in got} == {torch_thread.call(threading.get_ident)}


def test_a_stream_ends_after_the_item_at_which_stop_is_set_and_closes_its_source():
    stop, closed = threading.Event(), []

    def lanes():
        try:
            for i in range(1000):
                if i == 2:
                    stop.set()
                yield "spec", i
        finally:
            closed.append(True)

    stream = torch_thread.Stream(lanes(), stop)
    stream.join()
    items = []
    while not items or items[-1][0] != "done":
        items += stream.take(timeout=1)
    assert items == [("spec", 0), ("spec", 1), ("spec", 2), ("done", None)] and closed == [True]


def test_a_stream_hands_its_error_to_the_reader():
    def failing():
        yield "spec", 0
        raise RuntimeError("out of memory")

    stream = torch_thread.Stream(failing(), threading.Event())
    stream.join()
    assert [lane for lane, _ in stream.take(timeout=1)] == ["spec", "error"]
