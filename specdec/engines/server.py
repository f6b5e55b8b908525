"""Start a model server as a subprocess, wait until it answers, stop it.

It runs tied to this process (lifetime.py: it ends when this process ends, however it ends).
Its output goes to a log file under the cache; every failure is one line that says what failed and
where the log is: it exited with code N, it did not become healthy in time, it answered something else."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

from specdec.models.bundle import cache_root
from specdec.engines.base import EngineError
from specdec.engines.lifetime import popen_tied
from specdec.engines.stream import get_json

Progress = Callable[[float, str], None]  # (fraction of the wait, message), as the bundle reports
POLL_S = 0.5  # seconds between health checks


def free_port() -> int:
    """A TCP port on localhost nobody listens on now (the OS picks it)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_folder() -> Path:
    folder = cache_root() / "engines" / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def how_it_ended(code: int) -> str:
    """A process's return code in words: a negative one is the signal that killed it (-11: a crash)."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


class ServerProcess:
    """One server subprocess: `with ServerProcess(...) as server: server.url ...`.

    `healthy(answer)` reads the JSON of GET `health_path` and says whether the server is ready;
    a server that answers but is still loading should return False, not raise."""

    def __init__(self, name: str, argv: list[str], port: int, *, health_path: str = "/health",
                 healthy: Callable[[dict], bool] = lambda answer: answer.get("status") == "ok",
                 timeout_s: float = 300.0, env: dict | None = None, progress: Progress | None = None):
        self.name = name  # for messages and the log file's name, e.g. "llama.cpp speculative"
        self.argv = argv
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.health_path = health_path
        self.healthy = healthy
        self.timeout_s = timeout_s
        self.env = env
        self.progress = progress
        slug = "".join(c if c.isalnum() or c in "-." else "-" for c in name)
        self.log_path = log_folder() / f"{slug}-{port}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> ServerProcess:
        with open(self.log_path, "wb") as log:
            log.write(("$ " + " ".join(self.argv) + "\n").encode())
            log.flush()
            try:
                # a session of its own, so stop() reaches its whole process group; tied to this process,
                # so a SIGTERM or SIGKILL of ours (which skips atexit) ends it too
                self.process = popen_tied(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, **(self.env or {})}, start_new_session=True)
            except OSError as err:
                raise EngineError(f"{self.name}: cannot start {self.argv[0]} ({err.strerror or err})") from None
        atexit.register(self.stop)  # a normal exit stops it gracefully; lifetime.py covers the other ends
        try:
            self._wait()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self) -> None:
        start = time.monotonic()
        last = "no answer yet"
        while True:
            waited = time.monotonic() - start
            code = self.process.poll()
            if code is not None:
                raise EngineError(f"{self.name} {how_it_ended(code)} while starting; see log {self.log_path}")
            if waited > self.timeout_s:
                raise EngineError(f"{self.name} did not become healthy in {self.timeout_s:.0f} s ({last}); see log {self.log_path}")
            try:
                answer = get_json(self.name, self.url, self.health_path, timeout=2.0)
                if self.healthy(answer):
                    if self.progress:
                        self.progress(1.0, f"{self.name} ready after {waited:.0f} s")
                    return
                last = f"health: {answer}"
            except EngineError as err:
                if "answered something else" in str(err) and "HTTP 503" not in str(err):  # 503: still loading the model
                    raise EngineError(f"{err}; see log {self.log_path}") from None
                last = str(err).split(" is ", 1)[-1] if " is not reachable" in str(err) else str(err)
            if self.progress:
                self.progress(min(0.99, waited / self.timeout_s), f"starting {self.name} ({waited:.0f} s)")
            time.sleep(POLL_S)

    def stop(self, grace_s: float = 10.0) -> None:
        """Ask it to end (SIGTERM to its process group), then kill it if it does not."""
        process, self.process = self.process, None
        atexit.unregister(self.stop)
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def rss_bytes(self) -> int | None:
        """Resident memory of the server process now (Linux /proc), for deciding how many fit."""
        if not self.running:
            return None
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return None

    def __enter__(self) -> ServerProcess:
        return self if self.running else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
