"""One measurement at a time on this machine. `bench` and `passes` hold a lock file under the cache
while they load and time, so two timing runs never share the cores (each would slow the other's
figures); one that finds the lock held says who holds it, in one line, and waits."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

try:
    import fcntl
except ImportError:  # Windows: no flock; measurements there are not locked
    fcntl = None

from specdec.models.bundle import cache_root

LOCK_NAME = "measure.lock"


@contextmanager
def one_measurement(what: str, out=None):
    """Hold the machine's measurement lock for the block; `what` names this one to a process that
    waits for it. The message goes to `out` (default: stderr)."""
    if fcntl is None:
        yield
        return
    path = cache_root() / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another measurement"
            print(f"waiting for {holder} to finish (lock {path})", file=out or sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        f.truncate(0)  # the file is opened for appending: this write lands at its start
        f.write(f"pid {os.getpid()}, {what}")
        f.flush()
        try:
            yield
        finally:
            f.truncate(0)
            fcntl.flock(f, fcntl.LOCK_UN)
