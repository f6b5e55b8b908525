"""llama.cpp's pass costs read through a stand-in of llama-server's prompt cache: each request
evaluates only the tokens after the longest prefix it shares with the cached prompt, and reports
them in timings.prompt_n / prompt_ms. No build, no model."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec.engines.base import EngineError
from specdec.engines.llamacpp_costs import measure


def cost_ms(n: int) -> float:
    return 40.0 + 15.0 * n  # a pass that grows with the tokens it evaluates


class Cache(BaseHTTPRequestHandler):
    cached: list[int] = []
    reuse = True

    def log_message(self, *args):
        pass

    def do_POST(self):
        prompt = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["prompt"]
        shared = 0
        if Cache.reuse:
            while shared < min(len(prompt), len(Cache.cached)) and prompt[shared] == Cache.cached[shared]:
                shared += 1
        n = len(prompt) - shared
        Cache.cached = prompt
        chunk = {"content": "", "stop": True, "timings": {"prompt_n": n, "prompt_ms": cost_ms(n)}}
        body = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Cache)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Cache.cached, Cache.reuse = [], True
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_each_pass_is_timed_by_the_server_over_exactly_its_new_tokens(url):
    costs = measure(url, url, vocab=1000, sizes=(1, 2, 6), repeats=2)
    assert costs.sizes == (1, 2, 6)
    assert costs.target_s == pytest.approx(tuple(cost_ms(n) / 1000 for n in (1, 2, 6)))
    assert costs.draft_s == pytest.approx(cost_ms(1) / 1000)
    assert costs.verify_cost(5) == pytest.approx(cost_ms(6) / cost_ms(1))


def test_a_server_that_does_not_reuse_its_cache_is_refused(url):
    Cache.reuse = False
    with pytest.raises(EngineError, match="prompt cache was not reused"):
        measure(url, None, vocab=1000, sizes=(1,), repeats=1)
