"""Servers that end with the process that started them, however it ends.

`atexit` runs on a normal exit only: a SIGTERM or a SIGKILL ends the process without it, and a
server in a session of its own (so that stop() can signal its whole process group) would then run
on, orphaned. On Linux the child asks the kernel for a signal when its parent dies
(prctl PR_SET_PDEATHSIG), set between fork and exec so that it holds from the server's first
instruction.

The kernel's "parent" there is the *thread* that forked, not the process: a server forked from a
worker thread (the page starts servers from Gradio's workers) would be killed when that thread
ends. So every server is forked from one launcher thread that lives as long as the process.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
DEATH_SIGNAL = signal.SIGKILL  # the parent is gone: nobody is left to ask for a graceful stop
# (vLLM's engine processes set the same signal on themselves, so they follow its API server)


def _load_prctl():
    """libc's prctl, looked up here in the parent: the child between fork and exec must not import or load anything."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()


def dies_with_parent() -> bool:
    """Whether servers started here get the parent-death signal (Linux); elsewhere only atexit and stop() end them."""
    return _prctl is not None


def _die_with(parent_pid: int):
    """The child's side, run between fork and exec: ask for DEATH_SIGNAL when the launcher thread
    ends, and end now if the parent already died before the request was made."""
    def set_death_signal() -> None:
        _prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died between fork and prctl: the signal would never come
            os.kill(os.getpid(), DEATH_SIGNAL)
    return set_death_signal


class _Launcher:
    """One daemon thread that runs every Popen, so the forking thread outlives every server."""

    def __init__(self):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        if _prctl is None:  # no parent-death signal here: fork from the caller's thread as before
            return subprocess.Popen(argv, **kwargs)
        self._ensure_thread()
        done: Future = Future()
        self._requests.put((argv, kwargs, done))
        return done.result()  # re-raises the OSError of a binary that cannot start

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="server launcher", daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            argv, kwargs, done = self._requests.get()
            try:
                done.set_result(subprocess.Popen(argv, preexec_fn=_die_with(os.getpid()), **kwargs))
            except BaseException as err:  # handed to the caller's thread; this one keeps serving
                done.set_exception(err)


_launcher = _Launcher()


def popen_tied(argv: list[str], **kwargs) -> subprocess.Popen:
    """subprocess.Popen(argv, **kwargs) for a child that the kernel kills when this process ends."""
    return _launcher.popen(argv, **kwargs)
