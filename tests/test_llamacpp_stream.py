"""LlamaCppSource against a stand-in for llama-server's /completion stream (its chunk format: one
token id per chunk, cumulative draft counters in `timings`, a final chunk with the totals): steps
are cut where the counters move, end tokens and the length limit set `finish`, and a lane on the
wrong kind of server, or a server that is not llama-server, fails in one line. No build, no model."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec.core.runners.eager_model import CachedModel
from specdec.engines.base import EngineError
from specdec.engines.llamacpp import LlamaCppSource
from specdec.measure.faithfulness import forced_pass, kl_top
from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, PLAIN, check_invariants
from tests.support.llamacpp import Letters, chunks

EOS = 99


class Fake(BaseHTTPRequestHandler):
    stream: list[dict] = []
    raw: bytes | None = None
    last_request: dict = {}

    def log_message(self, *args):
        pass

    def do_POST(self):
        Fake.last_request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = Fake.raw if Fake.raw is not None else b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in Fake.stream)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def run(url, steps, max_new_tokens=64, speculative=True, stop_type="limit"):
    Fake.stream, Fake.raw = chunks(steps, stop_type), None
    source = LlamaCppSource(url, Letters(), speculative=speculative, eos_ids=[EOS])
    events = list(source.iter_events([0, 1], max_new_tokens))
    check_invariants(events)
    return events, source


def test_steps_are_cut_where_the_counters_move(url):
    steps = [([2], 0, 0), ([3, 4, 5, 6, 7, 8], 5, 5), ([9, 10, 11], 5, 2), ([12], 5, 0), ([13], 0, 0), ([14, 15], 1, 1)]
    events, source = run(url, steps, max_new_tokens=14)
    assert [e.kind for e in events] == [PLAIN, BONUS, CORRECTION, CORRECTION, PLAIN, BONUS]
    assert [list(e.emitted) for e in events] == [s[0] for s in steps]
    assert [(e.n_drafted, e.accepted, e.unseen_rejected) for e in events] == [(0, 0, 0), (5, 5, 0), (5, 2, 3), (5, 0, 5), (0, 0, 0), (1, 1, 0)]
    assert events[-1].finish == "length" and all(e.finish is None for e in events[:-1])
    assert source.final["tokens_predicted"] == 14
    request = Fake.last_request
    assert request["prompt"] == [0, 1] and request["stream"] and request["timings_per_token"] and request["temperature"] == 0


def test_an_end_token_among_accepted_drafts_ends_the_run(url):
    events, _ = run(url, [([2], 0, 0), ([3, EOS], 4, 3)], stop_type="eos")
    assert events[-1].kind == EOS_ACCEPTED and events[-1].accepted == 2 and events[-1].emitted == (3, EOS)
    assert events[-1].finish == "eos" and events[-1].unseen_rejected == 1


def test_an_end_token_as_the_targets_own_ends_the_run(url):
    events, _ = run(url, [([2], 0, 0), ([3, EOS], 4, 1)], stop_type="eos")
    assert events[-1].kind == CORRECTION and events[-1].finish == "eos"


def test_a_plain_lane_on_a_drafting_server_fails(url):
    with pytest.raises(EngineError, match="drafts \\(draft_n moved\\), so it is no plain baseline"):
        run(url, [([2], 0, 0), ([3, 4], 3, 1)], speculative=False)


def test_speculation_off_is_named(url):
    with pytest.raises(EngineError, match="has speculation off: draft_n stayed 0 over 16 tokens"):
        run(url, [([i], 0, 0) for i in range(2, 30)])
    with pytest.raises(EngineError, match="has speculation off: draft_n stayed 0 over 5 tokens"):
        run(url, [([i], 0, 0) for i in range(2, 7)])  # a short run is judged at its end
    events, _ = run(url, [([i], 0, 0) for i in range(2, 30)], speculative=False)  # the same stream is a fine plain run
    assert len(events) == 28


def test_a_server_that_is_not_llama_server_is_named(url):
    Fake.raw = b'data: {"choices": [{"text": "hi"}]}\n\n'
    with pytest.raises(EngineError, match="answered something else: a stream chunk without token ids and timings"):
        list(LlamaCppSource(url, Letters(), speculative=True).iter_events([0], 8))
    Fake.raw = None


def forced_listed(chosen: int) -> dict[int, float]:
    """What the stand-in server lists at a forced position: its chosen token at 0.9, the next id at 0.05."""
    return {chosen: math.log(0.9), chosen + 1: math.log(0.05)}


def serve(stream: list[dict]):
    """A stand-in llama-server: a streamed request gets `stream`; a request without streaming (the
    teacher forcing of the bench's faithfulness figures) gets the next id of the streamed run's own
    output after the prompt's prefix, as a greedy server whose output that is would answer, and, asked
    for `n_probs`, forced_listed's log-probabilities for that token and the next id."""
    handler = type("One", (Fake,), {})
    own_ids = [t for chunk in stream if not chunk["stop"] for t in chunk["tokens"]]
    handler.streamed_prompt, handler.forced_prompts = None, []

    def do_post(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if request["stream"]:
            handler.streamed_prompt = request["prompt"]
            body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in stream)
            kind = "text/event-stream"
        else:
            handler.forced_prompts.append(request["prompt"])
            position = len(request["prompt"]) - len(handler.streamed_prompt)
            answer = {"tokens": own_ids[position:position + request["n_predict"]], "stop": True}
            if request.get("n_probs"):
                chosen = own_ids[position]
                answer["completion_probabilities"] = [{"id": chosen, "top_logprobs": [
                    {"id": token, "logprob": lp} for token, lp in forced_listed(chosen).items()]}]
            body = json.dumps(answer).encode()
            kind = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    handler.do_POST = do_post
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.handler = handler
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_bench_runs_llamacpp_beside_ours_against_its_own_plain(tiny_pair, monkeypatch):
    from specdec.bench import runner as bench
    from specdec.bench.policies import mode_config
    from specdec.engines import llamacpp
    from specdec.measure.faithfulness import first_departure

    ids = [5, 6, 7, 8, 9, 10]
    spec = serve(chunks([([5], 0, 0), ([6, 7, 8], 3, 2), ([9, 10], 3, 1)]))
    plain = serve(chunks([([t], 0, 0) for t in ids]))
    started = []

    class Stub:
        def __init__(self, server):
            self.url = f"http://127.0.0.1:{server.server_address[1]}"

        def stop(self):
            started.append("stopped")

    def start_server(lane, k):
        started.append((lane, k))
        return Stub(spec if lane == llamacpp.SPECULATIVE else plain)

    monkeypatch.setattr(llamacpp, "start_server", start_server)
    assert bench.expand_modes(["llamacpp_spec"], ["dense"]) == ["plain", "llamacpp_plain", "llamacpp_spec"]
    report = bench.bench(tiny_pair, [{"id": "p", "prompt": "def f(x):"}], modes=["llamacpp_spec"], k=3,
                         max_new_tokens=6, warmup_tokens=2, log=lambda line: None)
    by = {r["mode"]: r for r in report["results"]}
    assert by["llamacpp_spec"]["identical_to_plain"] is True and by["llamacpp_plain"]["identical_to_plain"] is None
    assert by["llamacpp_spec"]["accepted_share"] == pytest.approx(3 / 6) and by["llamacpp_spec"]["target_passes"] == 3
    assert by["llamacpp_spec"]["tokens"] == 6 and by["llamacpp_spec"]["tok_s"] > 0
    assert report["summary"]["speedup_vs_own_plain"]["llamacpp_spec"] > 0
    assert "llamacpp_plain" not in report["summary"]["all_identical_to_plain"]
    assert started[:2] == [("plain", 3), ("speculative", 3)] and started.count("stopped") == 2
    assert "speedup vs the engine's own plain" in bench.table(report)

    # The plain server's faithfulness: asked one position at a time along our dense plain output.
    prompt = plain.handler.streamed_prompt
    reference = bench.run_ours(tiny_pair, prompt, mode_config("plain", 3, 6, "constant"))["ids"]
    assert plain.handler.forced_prompts == [prompt + reference[:i] for i in range(6)]
    assert by["llamacpp_plain"]["top1_agree_dense"] == pytest.approx(sum(a == b for a, b in zip(ids, reference)) / 6)
    assert by["llamacpp_plain"]["departs_dense_at"] == first_departure(ids, reference)
    # ... with its listed log-probabilities: the top-20 bound of the KL from dense, and no whole figure
    dense = forced_pass(CachedModel(tiny_pair.target, tiny_pair.vocab_size), prompt, reference).logprobs
    assert by["llamacpp_plain"]["kl_dense_top"] == pytest.approx(kl_top(dense, [forced_listed(t) for t in ids]))
    assert by["llamacpp_plain"]["kl_dense"] is None  # a server gives no whole figure
    assert spec.handler.forced_prompts == []  # a drafting lane's output is judged against plain, not forced
    spec.shutdown()
    plain.shutdown()


def test_a_token_held_back_for_an_unfinished_character_is_filled_in_from_the_final_chunk(url):
    steps = [([2], 0, 0), ([3, 4, 5], 3, 2), ([6, 7], 3, 1), ([8], 3, 0)]
    stream = chunks(steps)
    del stream[3]  # the chunk of token 4 (position 3): llama-server sends none for half a UTF-8 character
    Fake.stream, Fake.raw = stream, None
    events = list(LlamaCppSource(url, Letters(), speculative=True, eos_ids=[EOS]).iter_events([0, 1], 7))
    check_invariants(events)
    assert [list(e.emitted) for e in events] == [s[0] for s in steps]
    assert [(e.n_drafted, e.accepted) for e in events] == [(3 * bool(d), a) for _, d, a in steps] and events[-1].finish == "length"
