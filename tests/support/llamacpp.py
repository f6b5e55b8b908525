"""Stand-ins for llama-server without a build or a model: a tokenizer of letters, the chunks its
/completion stream sends for given steps, and a `servers` fixture (a speculative and a plain one,
registered for every test module by tests/conftest.py)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Letters:
    """A tokenizer whose token i is the letter chr(97 + i % 26): enough for TextTracker."""

    def decode(self, ids, **_):
        return "".join(chr(97 + i % 26) for i in ids)


def chunks(steps: list[tuple[list[int], int, int]], stop_type: str = "limit") -> list[dict]:
    """llama-server's stream for these steps: (ids, drafted, accepted) each, counters moved before a step's tokens."""
    out, drafted, accepted, ids = [], 0, 0, []
    for step_ids, d, a in steps:
        drafted, accepted = drafted + d, accepted + a
        timings = {"predicted_n": 0} | ({"draft_n": drafted, "draft_n_accepted": accepted} if drafted else {})
        for token in step_ids:
            ids.append(token)
            out.append({"content": "x", "tokens": [token], "stop": False, "tokens_predicted": len(ids), "timings": dict(timings)})
    out.insert(0, {"content": "", "tokens": [], "stop": False, "timings": {"predicted_n": 0}})  # the opening chunk
    final = {"predicted_n": len(ids)} | ({"draft_n": drafted, "draft_n_accepted": accepted} if drafted else {})
    out.append({"content": "", "tokens": ids, "stop": True, "stop_type": stop_type, "tokens_predicted": len(ids), "timings": final})
    return out


SPEC_STEPS = [([20], 0, 0), ([21, 22, 23], 4, 2), ([24, 25, 26, 27, 28], 4, 4), ([29], 4, 0)]
PLAIN_STEPS = [([20], 0, 0), ([21], 0, 0), ([22], 0, 0), ([23], 0, 0), ([24], 0, 0)]


def serve(steps):
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks(steps))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="module")
def servers():
    spec, spec_url = serve(SPEC_STEPS)
    plain, plain_url = serve(PLAIN_STEPS)
    yield spec_url, plain_url
    spec.shutdown()
    plain.shutdown()
