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
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec.engines.base import EngineError
from specdec.engines.vllm import PendingText, VllmSource, split_steps, tree_rss_bytes
from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, PLAIN, StepEvent, check_invariants


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


def serve_fake(**answers):
    handler = type("Handler", (FakeVllm,), answers)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def fake():
    server, handler, url = serve_fake()
    yield handler, url
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


def test_bench_runs_vllm_one_server_at_a_time_against_its_own_plain(tiny_pair, monkeypatch):
    from specdec.bench import runner as bench
    from specdec.engines import vllm

    ids = [5, 6, 7, 8, 9, 10]
    spec = serve_fake(ids=ids, chunks=[1, 3, 2], spec=spec_metrics([2, 1], [3, 3]))
    plain = serve_fake(ids=ids, chunks=[1] * 6)
    events = []  # starts and stops, in order

    class Stub:
        def __init__(self, lane):
            self.lane, self.url = lane, (spec if lane == vllm.SPECULATIVE else plain)[2]

        def stop(self):
            events.append(("stopped", self.lane))

    def start_server(lane, k):
        events.append(("started", lane, k))
        return Stub(lane)

    monkeypatch.setattr(vllm, "start_server", start_server)
    assert bench.expand_modes(["vllm_spec"], ["dense"]) == ["plain", "vllm_plain", "vllm_spec"]
    report = bench.bench(tiny_pair, [{"id": "p", "prompt": "def f(x):"}, {"id": "q", "prompt": "x = "}], modes=["vllm_spec"],
                         k=3, max_new_tokens=6, repeats=2, warmup_tokens=2, log=lambda line: None)
    by = {(r["prompt"], r["mode"]): r for r in report["results"]}
    assert by["p", "vllm_spec"]["identical_to_plain"] is True and by["p", "vllm_plain"]["identical_to_plain"] is None
    assert by["q", "vllm_spec"]["accepted_share"] == pytest.approx(3 / 6) and by["q", "vllm_spec"]["target_passes"] == 3
    assert by["q", "vllm_plain"]["target_passes"] == 6 and len(by["q", "vllm_spec"]["runs_s"]) == 2
    assert report["summary"]["speedup_vs_own_plain"]["vllm_spec"] > 0
    # Never two servers at once: each is stopped before the next starts.
    assert events == [("started", "plain", 3), ("stopped", "plain"), ("started", "speculative", 3), ("stopped", "speculative")]
    for server in (spec, plain):
        server[0].shutdown()


# --- against the real server on the embedded pair -------------------------------------------------

PROMPTS = ("Write a Python function that returns the sum of the squares of a list of numbers.",
           "Answer with one word: is Python a programming language?")  # the second ends on its own
MAX_NEW_TOKENS = 24
CUT_AT = 7  # a short run that ends inside a step (vLLM drafts past max_tokens)


VLLM_NEEDS_GB = 14  # measured: 13.0 GB (plain) to 16.5 GB (speculative) over its processes, shared pages counted twice


@pytest.fixture(scope="module")
def served():
    """Every prompt on vLLM's speculative server, which is then stopped, then on its plain server:
    one server at a time (each takes several GB). fp32: exactness is tested in fp32."""
    from specdec.models.bundle_chunks import BundleError
    from specdec.models.prompt import template_prompt
    from specdec.engines.llamacpp import embedded_tokenizer
    from specdec.engines.vllm import PLAIN as PLAIN_LANE
    from specdec.engines.vllm import SPECULATIVE, start_server
    from specdec.engines.vllm_env import is_ready, venv_dir

    if not is_ready():
        pytest.skip(f"vLLM's environment is not set up in {venv_dir()} (make vllm creates it)")
    try:
        tokenizer = embedded_tokenizer()
    except BundleError as err:
        pytest.skip(f"the embedded pair is not installed: {err}")
    prompt_ids = [template_prompt(tokenizer, p, chat=True) for p in PROMPTS]
    # vLLM in fp32 holds over 12 GB: let go of a pair an earlier test module loaded in this process
    # (the real pair in fp32 is about 9 GB), and skip where the machine still cannot hold the server.
    import gc

    import psutil

    from specdec.models import pair as models

    models._loaded.clear()
    gc.collect()
    free_gb = psutil.virtual_memory().available / 1e9
    if free_gb < VLLM_NEEDS_GB:
        pytest.skip(f"vLLM's fp32 server needs about {VLLM_NEEDS_GB} GB free; {free_gb:.1f} GB are")
    out = {"tokenizer": tokenizer}
    for lane in (SPECULATIVE, PLAIN_LANE):
        started = time.monotonic()
        with start_server(lane, dtype="float32") as server:
            start_s = time.monotonic() - started
            source = VllmSource(server.url, tokenizer, speculative=lane == SPECULATIVE)
            runs = []
            for ids, n in [(ids, MAX_NEW_TOKENS) for ids in prompt_ids] + [(prompt_ids[0], CUT_AT)]:
                t0 = time.monotonic()
                updates = list(source.iter_updates(ids, n))
                runs.append((updates, source.final))
                print(f"vllm {lane}: {source.final['usage']['completion_tokens']} tokens in {time.monotonic() - t0:.1f} s; "
                      f"metrics {json.dumps(source.final.get('metrics'))}")
            print(f"vllm {lane}: started in {start_s:.0f} s; {tree_rss_bytes(server.process.pid) / 1e9:.1f} GB resident")
            out[lane] = runs
            wrong = VllmSource(server.url, tokenizer, speculative=lane != SPECULATIVE)  # the other lane's role
            with pytest.raises(EngineError) as err:
                list(wrong.iter_events(prompt_ids[0], 4))
            out[f"{lane} as the other lane"] = str(err.value)
    return out


def steps_of(updates):
    return [u for u in updates if isinstance(u, StepEvent)]


def test_real_steps_add_up_to_vllms_own_totals(served):
    for updates, final in served["speculative"]:
        events = steps_of(updates)
        check_invariants(events)
        spec = final["metrics"]["speculative_decoding"]
        assert events[-1].total_tokens == final["usage"]["completion_tokens"]
        pending = [u for u in updates if isinstance(u, PendingText)]
        assert updates[: len(pending)] == pending and pending[-1].total_tokens == events[-1].total_tokens, "text first, steps at the end"
        assert events[0].kind == PLAIN and events[0].n_drafted == 0, "the first token comes from the prompt pass"
        assert len(events) - 1 == spec["num_spec_steps"]
        # A run that ends inside a step keeps that step's accepted drafts up to the end only; vLLM
        # counted the rest as accepted (and drafted): add them back to compare with its totals.
        dropped = spec["per_step_accepted"][-1] - events[-1].accepted if events[-1].kind == EOS_ACCEPTED else 0
        assert sum(e.n_drafted for e in events) + dropped == spec["num_draft_tokens"]
        assert sum(e.accepted for e in events) + dropped == spec["num_accepted_draft_tokens"]
        assert all(e.engine == "vllm" and e.p_target is None and e.draft_s is None and e.margins is None for e in events)
    kinds = {e.kind for updates, _ in served["speculative"] for e in steps_of(updates)}
    assert kinds & {BONUS, CORRECTION}, kinds
    finishes = [steps_of(updates)[-1].finish for updates, _ in served["speculative"]]
    assert finishes == ["length", "eos", "length"], finishes
    assert steps_of(served["speculative"][2][0])[-1].total_tokens == CUT_AT


def test_real_greedy_speculative_text_equals_vllms_plain_text(served):
    tokenizer = served["tokenizer"]
    for (spec, _), (plain, _) in zip(served["speculative"], served["plain"]):
        spec_ids = [t for e in steps_of(spec) for t in e.emitted]
        assert spec_ids == [t for e in steps_of(plain) for t in e.emitted]
        text = "".join(p for e in steps_of(spec) for p in e.emitted_text)
        assert text == tokenizer.decode(spec_ids, skip_special_tokens=True)
        assert text == "".join(p for u in spec if isinstance(u, PendingText) for p in u.text), "the streamed text is the coloured text"
    for updates, _ in served["plain"]:
        assert {e.kind for e in steps_of(updates)} == {PLAIN}


def test_real_lane_on_the_wrong_server_says_so(served):
    assert "has speculation off" in served["plain as the other lane"]
    assert "no plain baseline" in served["speculative as the other lane"]
