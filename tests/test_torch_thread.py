"""specdec.serving.torch_thread: heavy torch work from any thread runs on one thread, so the process keeps a
single OpenMP team (a second one makes every small op pay a wake-up; docs/app_speed.md)."""

from __future__ import annotations

import contextvars
import multiprocessing
import os
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


VISITOR = contextvars.ContextVar("visitor")


def test_work_handed_over_sees_the_callers_context_variables():
    """Gradio keeps the visitor's request in a context variable and `spaces` reads it there to bill the
    right visitor; an executor thread does not carry contexts on its own."""
    def lanes():
        yield "spec", VISITOR.get(None)  # read on the torch thread, at the first next()
        yield "spec", VISITOR.get(None)

    def visit(name):
        VISITOR.set(name)
        called = torch_thread.call(VISITOR.get, None)
        stream = torch_thread.Stream(lanes(), threading.Event())
        stream.join()
        return called, [item for lane, item in stream.take(timeout=1) if lane == "spec"]

    for name in ("ada", "grace"):  # each caller's own value, though the torch thread is the same
        assert contextvars.copy_context().run(visit, name) == (name, [name, name])
    assert VISITOR.get(None) is None  # nothing leaked into this context


def test_a_forked_child_gets_a_torch_thread_of_its_own():
    """A process forked from this one (ZeroGPU's GPU worker) inherits the executor without its thread:
    work handed over there must still run, on a thread of the child."""
    parent_thread = torch_thread.call(threading.get_ident)  # the executor's thread exists before the fork
    ctx = multiprocessing.get_context("fork")
    answers = ctx.SimpleQueue()
    child = ctx.Process(target=lambda: answers.put((torch_thread.call(lambda: 6 * 7), torch_thread.call(os.getpid))))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("work handed to the torch thread in a forked child never ran")
    assert child.exitcode == 0 and answers.get() == (42, child.pid)
    assert torch_thread.call(threading.get_ident) == parent_thread  # the parent keeps its own
