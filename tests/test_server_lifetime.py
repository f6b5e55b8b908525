"""A server started through ServerProcess never outlives the process that started it: a parent
ended by SIGTERM (which skips atexit) or SIGKILL takes its server with it, and a server started from
a short-lived thread (as the page starts them from its workers) lives on while the parent does.
The server is a stand-in (a small HTTP server answering /health), or the real llama-server where
it is built."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specdec.engines.lifetime import dies_with_parent

pytestmark = pytest.mark.skipif(not dies_with_parent(), reason="the parent-death signal is Linux's (prctl)")
ROOT = Path(__file__).resolve().parent.parent
GONE_WITHIN_S = 5.0

STAND_IN = """
import http.server as h, json, sys
class H(h.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header('Content-Type', 'application/json'); self.end_headers()
        self.wfile.write(json.dumps({'status': 'ok'}).encode())
    def log_message(self, *a): pass
h.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
"""

# The parent: starts one server from a worker thread that then ends, says the server's pid, and
# waits to be killed. `how` picks the server: "stand-in" or "llama.cpp".
PARENT = textwrap.dedent("""
    import sys, threading, time
    from specdec.engines.server import ServerProcess, free_port

    def start(how, out):
        if how == "llama.cpp":
            from specdec.engines.llamacpp import PLAIN, start_server
            out.append(start_server(PLAIN))
        else:
            port = free_port()
            out.append(ServerProcess("stand-in", [sys.executable, "-c", sys.argv[2], str(port)], port, timeout_s=30).start())

    started = []
    worker = threading.Thread(target=start, args=(sys.argv[1], started))
    worker.start()
    worker.join()  # the thread that asked for the server is gone before the parent is killed
    print(started[0].process.pid, flush=True)
    time.sleep(600)
""")


def alive(pid: int) -> bool:
    """Running, not merely a zombie waiting to be reaped by whoever adopted it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def start_parent(how: str, tmp_path) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if how == "stand-in":
        env["SPECDEC_CACHE"] = str(tmp_path)  # its log goes there; llama-server needs the usual cache (binary, pair)
    parent = subprocess.Popen([sys.executable, "-c", PARENT, how, STAND_IN], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    line = parent.stdout.readline()
    if not line.strip().isdigit():
        parent.kill()
        pytest.fail(f"the parent did not start its server (said {line!r}, exit {parent.wait()})")
    return parent, int(line)


def kill_and_check(parent: subprocess.Popen, server_pid: int, sig: int) -> None:
    try:
        time.sleep(1.0)
        assert alive(server_pid), "the server died with the thread that started it, not with its process"
        os.kill(parent.pid, sig)
        parent.wait(10)
        deadline = time.monotonic() + GONE_WITHIN_S
        while alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(server_pid), f"server {server_pid} outlived its parent ended by {signal.Signals(sig).name}"
    finally:
        if parent.poll() is None:
            parent.kill()
        if alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_stand_in_server_ends_with_its_parent(sig, tmp_path):
    parent, server_pid = start_parent("stand-in", tmp_path)
    kill_and_check(parent, server_pid, sig)


def test_llama_server_ends_with_its_parent(tmp_path):
    from specdec.models.bundle import gguf_files
    from specdec.models.bundle_chunks import BundleError
    from specdec.engines.llamacpp_build import is_built

    if not is_built():
        pytest.skip("llama-server is not built (python -m specdec engines build)")
    try:
        gguf_files()
    except BundleError as err:
        pytest.skip(f"the embedded pair is not installed: {err}")
    parent, server_pid = start_parent("llama.cpp", tmp_path)
    kill_and_check(parent, server_pid, signal.SIGTERM)
