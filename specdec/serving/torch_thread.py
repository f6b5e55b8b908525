"""All heavy torch work of a process on one long-lived thread.

libgomp, the OpenMP runtime of torch's CPU wheels, gives every thread that enters a parallel
region a team of helper threads of its own, kept for as long as that thread lives. Once the process
holds more OpenMP threads than there are CPUs, libgomp stops spin-waiting between regions and parks
its helpers in the kernel, so every small op pays a wake-up. A command-line run does all its work
in the main thread and never gets there; the app's handlers run in whichever worker thread Gradio
picks, and the first run in a second thread did. Measured on a 2-core machine with the embedded
pair: a draft step took 171 ms with one team and 240 ms once a second one existed
(docs/app_speed.md). So whatever loads or runs a model from a handler hands that work to this one
thread: `call` for a function, `Stream` for a run whose items another thread shows as they come.

Work handed over runs in a copy of the caller's context variables (contextvars): Gradio keeps the
visitor's request in one, and on a ZeroGPU Space the `spaces` package reads it there to schedule
the call on that visitor's quota; a plain executor thread would see none and every visitor would
be scheduled as anonymous. A process forked from this one (ZeroGPU's GPU worker) inherits the
executor but not its thread, so the child gets a fresh executor of its own (os.register_at_fork).
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from typing import TypeVar

T = TypeVar("T")

def _new_executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="specdec-torch")


_executor = _new_executor()
_ident: list[int] = []  # the torch thread's id, once it has started


def _after_fork_in_child() -> None:
    """A forked child holds a copy of the executor whose thread did not survive the fork: work
    submitted to it would wait forever. The child starts its own torch thread on first use."""
    global _executor
    _executor = _new_executor()
    _ident.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _mark() -> None:
    if not _ident:
        _ident.append(threading.get_ident())


def on_torch_thread() -> bool:
    return bool(_ident) and threading.get_ident() == _ident[0]


def submit(fn: Callable[..., T], /, *args, **kwargs) -> Future:
    """fn(*args, **kwargs) on the torch thread, queued behind what it is doing now, in a copy of the
    caller's context variables (the visitor's Gradio request among them)."""
    context = contextvars.copy_context()

    def run():
        _mark()
        return fn(*args, **kwargs)

    return _executor.submit(context.run, run)


def call(fn: Callable[..., T], /, *args, **kwargs) -> T:
    """fn(*args, **kwargs) on the torch thread, waiting for its result (or its exception); run
    directly when already there, so work handed over can hand over more."""
    if on_torch_thread():
        return fn(*args, **kwargs)
    return submit(fn, *args, **kwargs).result()


_END = object()


def iterate(items: Iterator[T]) -> Iterator[T]:
    """The items of `items`, each one produced on the torch thread (one hand-over per item)."""
    while (item := call(next, items, _END)) is not _END:
        yield item


class Stream:
    """A run's stream of (lane, item) pairs, read on the torch thread while the caller's thread
    shows what has come so far; ended (the stream closed) after the item at which `stop` is found
    set. The engine does not wait while a frame is built and sent, and a frame does not wait for a
    step."""

    def __init__(self, stream: Iterator[tuple[str, object]], stop: threading.Event):
        if on_torch_thread():
            raise RuntimeError("a Stream is read from another thread than the torch thread")
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.stop = stop
        self.future = submit(self._run, stream)

    def _run(self, stream: Iterator[tuple[str, object]]) -> None:
        try:
            with closing(stream):
                for item in stream:
                    self.queue.put(item)
                    if self.stop.is_set():  # checked after every step: Stop, or the visitor's tab closed
                        break
            self.queue.put(("done", None))
        except BaseException as err:  # handed to the reading thread, which raises it there
            self.queue.put(("error", err))

    def take(self, timeout: float) -> list[tuple[str, object]]:
        """Everything that has arrived, waiting up to `timeout` seconds for the first item."""
        try:
            items = [self.queue.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                items.append(self.queue.get_nowait())
            except queue.Empty:
                return items

    def join(self) -> None:
        """Wait until the torch thread has left the stream (it ends within a step once `stop` is set)."""
        self.future.result()
