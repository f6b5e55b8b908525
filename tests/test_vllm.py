"""vLLM as a source of steps.

Without a model: the steps assigned from vLLM's per-step counts (the prompt pass's token, accepted
+ 1 per verify step, the last step cut at max_tokens or end of text), and the client against a fake
server that answers as vLLM 0.32 does (and as servers that are not vLLM, or do not speculate, do).
Against the real server on the embedded pair (one start per lane; skipped where `make vllm` has
not set the environment up): the steps add up to vLLM's own totals, and greedy speculative text
equals vLLM's plain text."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec.engines.base import EngineError
from specdec.engines.vllm import PendingText, VllmSource, split_steps
from specdec.events import BONUS, CORRECTION, EOS_ACCEPTED, PLAIN, StepEvent, check_invariants


# --- step assignment ------------------------------------------------------------------------------


def test_first_token_is_the_prompt_pass_then_accepted_plus_one_per_step():
    # 1 + (5+1) + (2+1) + (0+1) = 11 tokens exactly: nothing cut.
    assert split_steps(11, [5, 2, 0], [5, 5, 5]) == [(1, 0, 0), (6, 5, 5), (3, 5, 2), (1, 5, 0)]


def test_last_step_cut_at_max_tokens_keeps_its_counts():
    # max_tokens 8: the second verify step accepted 4 and would emit 5, only 1 fits.
    assert split_steps(8, [5, 4], [5, 5]) == [(1, 0, 0), (6, 5, 5), (1, 5, 4)]


def test_one_token_run_has_only_the_prompt_pass():
    assert split_steps(1, [], []) == [(1, 0, 0)]


def test_counts_that_do_not_cover_the_tokens_are_refused():
    with pytest.raises(ValueError, match="cover 4 of 9"):
        split_steps(9, [2], [5])
    with pytest.raises(ValueError, match="ended at step 1"):
        split_steps(4, [2, 3], [5, 5])
    with pytest.raises(ValueError, match="3 accepted of 2"):
        split_steps(9, [3], [2])
    with pytest.raises(ValueError, match="2 accepted counts for 1"):
        split_steps(9, [1, 1], [5])


# --- the client, against a fake vLLM --------------------------------------------------------------


class Letters:
    """A tokenizer whose token i is the letter chr(97 + i % 26): enough for TextTracker."""

    def decode(self, ids, **_):
        return "".join(chr(97 + i % 26) for i in ids)


class FakeVllm(BaseHTTPRequestHandler):
    """Answers /version, /v1/models and a streamed /v1/completions like vLLM 0.32: one chunk per
    scheduler step with its token ids, then the usage chunk with metrics, then [DONE].
    The class attributes set what it says."""

    ids: list[int] = []
    chunks: list[int] = []  # tokens per chunk
    finish_reason = "length"
    spec: dict | None = None  # metrics.speculative_decoding, or None (no speculation)
    version = True  # False: /version is not there (not vLLM)

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/version" and self.version:
            self._json({"version": "0.32.0"})
        elif self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": "target", "owned_by": "vllm"}]})
        else:
            self.send_response(404)
            self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["return_token_ids"] and body["stream_options"] == {"include_usage": True} and body["model"] == "target"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        start = 0
        for i, n in enumerate(self.chunks):
            last = i == len(self.chunks) - 1
            choice = {"index": 0, "text": "", "token_ids": self.ids[start : start + n], "finish_reason": self.finish_reason if last else None}
            self._event({"object": "text_completion", "choices": [choice]})
            start += n
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(self.ids), "total_tokens": 0}
        final = {"object": "text_completion", "choices": [], "usage": usage}
        if self.spec is not None:
            final["metrics"] = {"speculative_decoding": self.spec}
        self._event(final)
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, value):
        self.wfile.write(f"data: {json.dumps(value)}\n\n".encode())
        self.wfile.flush()

    def _json(self, value):
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake():
    handler = type("Handler", (FakeVllm,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def spec_metrics(accepted, drafted):
    return {"num_spec_steps": len(accepted), "num_draft_tokens": sum(drafted), "num_accepted_draft_tokens": sum(accepted),
            "per_step_accepted": accepted, "per_step_drafted": drafted}


def test_speculative_stream_streams_text_then_colours_every_step(fake):
    handler, url = fake
    handler.ids = list(range(2, 14))  # 12 tokens: 1 + 6 + 3 + 2, cut in a step that accepted 4
    handler.chunks = [1, 6, 3, 2]
    handler.spec = spec_metrics([5, 2, 4], [5, 5, 5])
    updates = list(VllmSource(url, Letters(), speculative=True).iter_updates([0, 1], 12))
    pending = [u for u in updates if isinstance(u, PendingText)]
    events = [u for u in updates if isinstance(u, StepEvent)]
    assert updates[: len(pending)] == pending  # the text first, the steps once the counts arrived
    assert "".join(p for u in pending for p in u.text) == "cdefghijklmn" and pending[-1].total_tokens == 12
    check_invariants(events)
    assert [e.kind for e in events] == [PLAIN, BONUS, CORRECTION, EOS_ACCEPTED]
    assert [len(e.emitted) for e in events] == [1, 6, 3, 2]
    assert [e.unseen_rejected for e in events] == [0, 0, 3, 1]
    assert "".join(t for e in events for t in e.emitted_text) == "cdefghijklmn"
    assert events[-1].finish == "length" and events[-1].total_tokens == 12 and events[-1].accepted == 2
    assert all(e.engine == "vllm" and e.p_target is None and e.draft_s is None and e.margins is None for e in events)


def test_plain_stream_is_one_token_per_step(fake):
    handler, url = fake
    handler.ids, handler.chunks, handler.finish_reason, handler.spec = [5, 6, 7], [1, 1, 1], "stop", None
    events = list(VllmSource(url, Letters(), speculative=False).iter_events([0], 8))
    check_invariants(events)
    assert [e.kind for e in events] == [PLAIN] * 3 and events[-1].finish == "eos"


def test_speculation_off_plain_that_speculates_and_not_vllm_are_one_line_errors(fake):
    handler, url = fake
    handler.ids, handler.chunks, handler.spec = [5, 6, 7], [1, 1, 1], None
    with pytest.raises(EngineError, match="speculation off") as err:
        list(VllmSource(url, Letters(), speculative=True).iter_events([0], 3))
    assert "\n" not in str(err.value)
    handler.spec = spec_metrics([1], [5])
    with pytest.raises(EngineError, match="no plain baseline"):
        list(VllmSource(url, Letters(), speculative=False).iter_events([0], 3))
    handler.spec = {"num_spec_steps": 1, "num_draft_tokens": 5}  # --per-request-spec-decode-metrics summary
    with pytest.raises(EngineError, match="detailed"):
        list(VllmSource(url, Letters(), speculative=True).iter_events([0], 3))
    handler.version = False
    with pytest.raises(EngineError, match="not a vLLM server|answered something else"):
        list(VllmSource(url, Letters(), speculative=True).iter_events([0], 3))


def test_unreachable_server_is_one_line():
    with pytest.raises(EngineError, match="not reachable"):
        list(VllmSource("http://127.0.0.1:9", Letters(), speculative=True).iter_events([0], 3))


def test_one_token_speculative_run_has_no_step_lists(fake):
    # vLLM leaves per_step_* out when no verify step ran: the run is the prompt pass's token alone.
    handler, url = fake
    handler.ids, handler.chunks, handler.spec = [5], [1], {"num_spec_steps": 0, "num_draft_tokens": 0}
    events = list(VllmSource(url, Letters(), speculative=True).iter_events([0], 1))
    check_invariants(events)
    assert [e.kind for e in events] == [PLAIN] and events[0].finish == "length"
