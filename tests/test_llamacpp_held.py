"""Tokens llama-server holds back: it sends no chunk for a token that ends half a UTF-8 character,
and the next chunk carries the text of them all with only its own token's id. The streams here are
built the way llama-server builds them (a chunk only where the text so far is whole UTF-8, its text
everything not sent yet) over tiny-random's byte-level vocabulary, where an emoji is four tokens and
a CJK character three: every step keeps its ids and the page's text stays exact."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec.core.events import CORRECTION, PLAIN, check_invariants
from specdec.engines.held_tokens import HeldTokens, byte_level_alphabet, token_bytes
from specdec.engines.llamacpp import LlamaCppSource

PROMPT = [5, 6]


def bytes_of(tokenizer, token_id: int) -> bytes:
    if token_id in tokenizer.all_special_ids:  # llama-server shows no text for an end token
        return b""
    return token_bytes(tokenizer.convert_ids_to_tokens(token_id), byte_level_alphabet())


def server_stream(tokenizer, steps: list[tuple[list[int], int, int]], stop_type: str = "eos") -> list[dict]:
    """The chunks llama-server sends for these steps ((ids, drafted, accepted) each)."""
    out = [{"content": "", "tokens": [], "stop": False, "timings": {"predicted_n": 0}}]
    drafted = accepted = 0
    made, sent = b"", 0  # the bytes generated so far, and how many of them went out
    position = 0
    for ids, d, a in steps:
        drafted, accepted = drafted + d, accepted + a
        for token in ids:
            position += 1
            made += bytes_of(tokenizer, token)
            try:
                made.decode("utf-8")
            except UnicodeDecodeError:  # ends inside a character: no chunk for this token
                continue
            timings = {"predicted_n": position} | ({"draft_n": drafted, "draft_n_accepted": accepted} if drafted else {})
            out.append({"content": made[sent:].decode(), "tokens": [token], "stop": False,
                        "tokens_predicted": position, "timings": timings})
            sent = len(made)
    final = {"predicted_n": position} | ({"draft_n": drafted, "draft_n_accepted": accepted} if drafted else {})
    out.append({"content": "", "tokens": [], "stop": True, "stop_type": stop_type, "tokens_predicted": position, "timings": final})
    return out


class Fake(BaseHTTPRequestHandler):
    """A streamed /completion answers `stream`; one without streaming answers `continuation`."""

    stream: list[dict] = []
    continuation: list[int] = []
    requests: list[dict] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Fake.requests.append(request)
        if request.get("stream"):
            kind, body = "text/event-stream", b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in Fake.stream)
        else:
            kind, body = "application/json", json.dumps({"tokens": Fake.continuation[: request["n_predict"]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def run(url, tokenizer, steps, max_new_tokens=64, stop_type="eos"):
    Fake.stream, Fake.requests = server_stream(tokenizer, steps, stop_type), []
    source = LlamaCppSource(url, tokenizer, speculative=True)
    events = list(source.iter_events(PROMPT, max_new_tokens))
    check_invariants(events)
    return events


def test_an_emoji_and_cjk_split_across_steps_keep_their_ids_and_text(url, tiny_pair):
    tokenizer = tiny_pair.tokenizer
    smile, tokyo, eos = encode(tokenizer, "🙂"), encode(tokenizer, "東京"), tokenizer.eos_token_id
    assert len(smile) == 4 and len(tokyo) == 6  # byte tokens here: every character is split
    steps = [(smile[:1], 0, 0), (smile[1:] + tokyo[:1], 4, 3), (tokyo[1:4], 5, 2), (tokyo[4:] + [eos], 3, 2)]
    stream = server_stream(tokenizer, steps)
    assert len(stream) == 2 + 4  # the opening, one chunk per whole character (🙂 東 京), the end token's, the final
    events = run(url, tokenizer, steps)
    assert [list(e.emitted) for e in events] == [ids for ids, _, _ in steps]
    assert [e.kind for e in events] == [PLAIN, CORRECTION, CORRECTION, CORRECTION] and events[-1].finish == "eos"
    assert [(e.n_drafted, e.accepted) for e in events] == [(0, 0), (4, 3), (5, 2), (3, 2)]
    assert "".join(p for e in events for p in e.emitted_text) == "🙂東京"
    # each character's text shows on the token that completes it
    assert [e.emitted_text for e in events] == [("",), ("", "", "🙂", ""), ("", "東", ""), ("", "京", "")]
    assert len(Fake.requests) == 1, "the ids came from the stream's own text, not from asking again"


def test_a_run_that_stops_inside_a_character_asks_for_its_last_ids_once(url, tiny_pair):
    tokenizer = tiny_pair.tokenizer
    text = encode(tokenizer, "ok ") + encode(tokenizer, "🎉")
    steps = [(text[:1], 0, 0), (text[1:3], 2, 1), (text[3:5], 3, 1)]  # the limit cuts the emoji after its third byte
    Fake.continuation = text[2:5]
    events = run(url, tokenizer, steps, max_new_tokens=5, stop_type="limit")
    assert [list(e.emitted) for e in events] == [ids for ids, _, _ in steps]
    assert events[-1].finish == "length" and events[-1].total_tokens == 5
    asked = Fake.requests[-1]
    assert len(Fake.requests) == 2 and asked["stream"] is False and asked["prompt"] == PROMPT + text[:2] and asked["n_predict"] == 3
    assert "".join(p for e in events for p in e.emitted_text) == "ok "  # half an emoji shows nothing


def test_held_bytes_split_into_vocabulary_tokens_where_the_encoding_differs(tiny_pair):
    tokenizer = tiny_pair.tokenizer
    held = HeldTokens(tokenizer)
    smile = encode(tokenizer, "🙂")
    assert held.recover("🙂", smile[-1], 3) == smile[:3]  # the tokenizer's own encoding
    assert held.recover("a🙂", smile[-1], 4) == encode(tokenizer, "a") + smile[:3]  # bytes split: "a🙂" has its own encoding
    assert held.recover("🙂", smile[-1], 9) is None  # more tokens than bytes: nothing fits
    assert held.recover("🙂", encode(tokenizer, "x")[0], 1) is None  # the chunk's token is not the text's end


def test_a_tokenizer_without_a_vocabulary_leaves_the_ids_to_the_final_chunk():
    from tests.support.llamacpp import Letters

    assert HeldTokens(Letters()).recover("xy", 3, 1) is None


def test_held_tokens_across_two_steps_keep_the_servers_totals(url, tiny_pair):
    tokenizer = tiny_pair.tokenizer
    o, smile = encode(tokenizer, "o"), encode(tokenizer, "🙂")
    steps = [(o, 0, 0), (smile[:2], 2, 1), (smile[2:], 2, 1)]  # the emoji's chunk shows both steps' counters summed
    events = run(url, tokenizer, steps, stop_type="limit")
    assert [t for e in events for t in e.emitted] == o + smile
    assert sum(e.n_drafted for e in events) == 4 and sum(e.accepted for e in events) == 2  # the server's totals
    assert "".join(p for e in events for p in e.emitted_text) == "o🙂"
