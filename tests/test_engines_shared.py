"""specdec.engines' shared pieces without a model: the step assembler keeps the event contract, the
event-stream client reads a fake server and names each failure in one line, and a server process
that dies or never answers is reported with its exit code and its log."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec.engines.base import EngineError, StepAssembler
from specdec.engines.server import ServerProcess, free_port
from specdec.engines.stream import get_json, post_stream
from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, PLAIN, check_invariants
from tests.support.llamacpp import Letters


def test_assembler_builds_contract_events_from_counts():
    steps = StepAssembler("llama.cpp", Letters(), [0, 1])
    events = [
        steps.event([2], 0, 0, 0.5),  # the prompt pass's token
        steps.event([3, 4, 5, 6, 7, 8], 5, 5, 0.7),
        steps.event([9, 10, 11], 5, 2, 0.8),
        steps.event([12], 5, 0, 0.9),
        steps.event([13, 14], 4, 3, 1.0, finish="eos"),  # ended on its second accepted draft
    ]
    check_invariants(events)
    assert [e.kind for e in events] == [PLAIN, BONUS, CORRECTION, CORRECTION, EOS_ACCEPTED]
    assert [e.n_drafted for e in events] == [0, 5, 5, 5, 3]
    assert [e.unseen_rejected for e in events] == [0, 0, 3, 5, 1]
    assert events[2].drafted == (9, 10) and events[2].drafted_text == ("j", "k") and events[2].emitted_text == ("j", "k", "l")
    assert events[-1].total_tokens == 13 and events[-1].finish == "eos" and events[-1].engine == "llama.cpp"
    assert all(e.p_target is None and e.margins is None and e.draft_s is None for e in events)
    with pytest.raises(ValueError, match="3 tokens for 1 accepted"):
        steps.event([1, 2, 3], 4, 1, 1.1)


class Fake(BaseHTTPRequestHandler):
    """/health: JSON; /stream: three events and [DONE]; /html: a page; /broken: half an event."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/health":
            self._send(200, "application/json", b'{"status": "ok"}')
        else:
            self._send(200, "text/html", b"<html>hello</html>")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/stream":
            body = b"".join(b"data: " + json.dumps({"n": i}).encode() + b"\n\n" for i in range(3)) + b"data: [DONE]\n\n"
            self._send(200, "text/event-stream", body)
        elif self.path == "/broken":
            self._send(200, "text/event-stream", b'data: {"n": \n\n')
        elif self.path == "/fails":
            self._send(200, "text/event-stream", b'error: {"code": 500, "message": "out of memory"}\n\n')
        else:
            self._send(404, "application/json", b'{"error": "File Not Found"}')

    def _send(self, code, kind, body):
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def fake():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_stream_reads_events_until_done(fake):
    got = list(post_stream("x", fake, "/stream", {"stream": True}))
    assert [e for _, e in got] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert all(t >= 0 for t, _ in got) and got[0][0] <= got[-1][0]
    assert get_json("x", fake, "/health") == {"status": "ok"}


@pytest.mark.parametrize("call, message", [
    (lambda url: list(post_stream("x", url, "/nowhere", {})), "answered something else: HTTP 404 on /nowhere"),
    (lambda url: list(post_stream("x", url, "/html-post", {})), "answered something else: HTTP 404"),
    (lambda url: list(post_stream("x", url, "/broken", {})), "answered something else on /broken"),
    (lambda url: list(post_stream("x", url, "/fails", {})), "failed during /fails: .*out of memory"),
    (lambda url: get_json("x", url, "/page"), "answered something else on /page: '<html>hello</html>'"),
    (lambda url: get_json("x", f"http://127.0.0.1:{free_port()}", "/health", timeout=2), "is not reachable"),
])
def test_each_failure_is_one_clear_line(fake, call, message):
    with pytest.raises(EngineError, match=message) as err:
        call(fake)
    assert "\n" not in str(err.value)


def test_a_server_that_exits_names_its_code_and_log():
    port = free_port()
    server = ServerProcess("fake server", [sys.executable, "-c", "import sys; print('bad flag'); sys.exit(3)"], port, timeout_s=20)
    with pytest.raises(EngineError, match=r"fake server exited with code 3 while starting; see log .*fake-server-\d+\.log"):
        server.start()
    assert "bad flag" in server.log_path.read_text()
    assert not server.running


def test_a_server_that_crashes_names_the_signal():
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    server = ServerProcess("crashing server", [sys.executable, "-c", crash], free_port(), timeout_s=20)
    with pytest.raises(EngineError, match=r"crashing server was killed by SIGSEGV while starting; see log"):
        server.start()
    assert not server.running


def test_a_server_that_never_answers_times_out_and_is_stopped():
    server = ServerProcess("silent", [sys.executable, "-c", "import time; time.sleep(60)"], free_port(), timeout_s=1.5)
    with pytest.raises(EngineError, match=r"silent did not become healthy in 2 s \(.*\); see log"):
        server.start()
    assert not server.running


def test_a_server_that_answers_is_ready_and_stopped_on_exit():
    port = free_port()
    code = ("import http.server as h, json\n"
            "class H(h.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        self.send_response(200); self.send_header('Content-Type', 'application/json'); self.end_headers()\n"
            "        self.wfile.write(json.dumps({'status': 'ok'}).encode())\n"
            "    def log_message(self, *a): pass\n"
            f"h.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n")
    with ServerProcess("tiny", [sys.executable, "-c", code], port, timeout_s=20) as server:
        assert server.running and get_json("tiny", server.url, "/health") == {"status": "ok"}
        assert server.rss_bytes() > 0
    assert not server.running
