"""llama.cpp's llama-server as a source of StepEvents, and the embedded pair's servers.

A run is one streamed `/completion` request: the prompt goes as token ids (templated by the
project's tokenizer, so the server sees exactly the prompt our engine sees), and with
`"timings_per_token": true` every chunk carries one token id and the server's cumulative counters
`timings.draft_n` (tokens drafted) and `timings.draft_n_accepted`. The counters move once per verify
step, before the step's tokens are sent, so a chunk whose counters differ from the last ones opens
a new step of (accepted + 1) tokens: its accepted drafts, then the target's own token. A token with
unchanged counters after a complete step is a step that drafted nothing (the first token comes from
the prompt pass; near the length limit the server drafts no more than fits). The cutting is in
llamacpp_steps.py.

A token that ends half a UTF-8 character (an emoji, a rarer CJK character) gets no chunk of its
own: the next chunk carries the text of both and its own id only. The gap shows in the chunk's
position, and the missing ids are recovered from that text (held_tokens.py); tokens held back at
the very end of a run, which no chunk follows, are asked for once after the stream.

What llama-server does not send stays None: the rejected drafts' ids and text (only their count),
p_target and p_draft, logit margins, and the draft and verify seconds apart (elapsed_s is the
client's clock at each step's arrival, from the moment the request was sent: prompt included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from specdec.core.events import FINISH_EOS, FINISH_LENGTH, StepEvent
from specdec.engines.base import LLAMA_CPP, Capabilities, EngineError, StepAssembler
from specdec.engines.server import Progress, ServerProcess, free_port
from specdec.engines.held_tokens import HeldTokens
from specdec.engines.llamacpp_steps import StepCutter, fill
from specdec.engines.stream import get_json, post_json, post_stream

K = 5  # draft tokens per step the speculative server is started with (--spec-draft-n-max)
CONTEXT = 2048  # tokens of context per server: prompts and outputs here are a few hundred
THREADS = 2  # -t and -td: the machines this project runs on have 2 cores
START_TIMEOUT_S = 180.0  # loading the two GGUF files takes seconds; a slow disk or a busy machine more
SPEC_OFF_AFTER = 16  # tokens after which a speculative server that drafted nothing has speculation off
PLAIN, SPECULATIVE = "plain", "speculative"


def server_argv(binary, target, draft=None, *, port: int, k: int = K, threads: int = THREADS, context: int = CONTEXT) -> list[str]:
    """llama-server's command line: plain with no draft; speculative with the draft model.
    `--spec-type draft-simple` is needed: the default type is none, which loads -md and never uses it."""
    argv = [str(binary), "-m", str(target), "-c", str(context), "-t", str(threads), "-np", "1",
            "--host", "127.0.0.1", "--port", str(port)]
    if draft is not None:
        argv += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(k), "-td", str(threads)]
    return argv


def start_server(lane: str, *, k: int = K, port: int | None = None, progress: Progress | None = None) -> ServerProcess:
    """Start llama-server on the embedded pair's GGUF files (building it first if needed) and wait
    until it answers. The caller stops it (ServerProcess.stop, or use it as a context manager)."""
    from specdec.models.bundle import gguf_files
    from specdec.engines.llamacpp_build import build

    if lane not in (PLAIN, SPECULATIVE):
        raise ValueError(f"lane must be one of {PLAIN!r}, {SPECULATIVE!r}, got {lane!r}")
    binary = build()
    target, draft = gguf_files()
    port = port or free_port()
    argv = server_argv(binary, target, draft if lane == SPECULATIVE else None, port=port, k=k)
    return ServerProcess(f"llama.cpp {lane}", argv, port, timeout_s=START_TIMEOUT_S, progress=progress).start()


def embedded_tokenizer():
    """The embedded pair's tokenizer without loading its models (for tests and the bench's checks;
    the page passes its loaded pair's): the converted target's, else read from the GGUF file."""
    from transformers import AutoTokenizer

    from specdec.models.bundle import gguf_files

    target, _ = gguf_files()
    converted = target.parent.parent / target.stem  # bundle layout: <cache>/<bundle>/gguf/<key>.gguf beside <cache>/<bundle>/<key>/
    if (converted / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(converted)
    return AutoTokenizer.from_pretrained(target.parent, gguf_file=target.name)


@dataclass
class EmbeddedServers:
    """The embedded pair's two llama.cpp servers, for the page: their URLs, and stop() when done."""

    speculative: ServerProcess
    plain: ServerProcess

    @property
    def spec_url(self) -> str:
        return self.speculative.url

    @property
    def plain_url(self) -> str:
        return self.plain.url

    def stop(self) -> None:
        self.speculative.stop()
        self.plain.stop()


def start_embedded_servers(*, k: int = K, progress: Progress | None = None) -> EmbeddedServers:
    """Both servers at once (about 1.3 GB resident each with the draft, less without), for a page
    that alternates speculative and plain runs. Raises EngineError with one line."""
    spec = start_server(SPECULATIVE, k=k, progress=progress)
    try:
        return EmbeddedServers(spec, start_server(PLAIN, progress=progress))
    except BaseException:
        spec.stop()
        raise


def check_server(base_url: str, timeout: float = 5.0) -> dict:
    """GET /health and /props of a running llama-server; EngineError with one line when it cannot be
    reached or is not a ready llama-server."""
    health = get_json(LLAMA_CPP, base_url, "/health", timeout)
    if health.get("status") != "ok":
        raise EngineError(f"{LLAMA_CPP} at {base_url} is not ready: /health says {health}")
    props = get_json(LLAMA_CPP, base_url, "/props", timeout)
    if "default_generation_settings" not in props:
        raise EngineError(f"{LLAMA_CPP} at {base_url} answered something else on /props: not a llama-server")
    return props


class LlamaCppSource:
    """Steps of one llama-server, read from its stream (see the module's docstring).

    `speculative`: the server should draft (one started with -md and --spec-type draft-simple);
    a run on which it drafts nothing in SPEC_OFF_AFTER tokens fails with "speculation is off".
    Plain (False): the server must not draft; one that does fails too, since it is no plain baseline."""

    engine = LLAMA_CPP
    # Greedy runs at the K the server was started with; counts of drafts, no p or q, no run held between calls.
    capabilities = Capabilities(in_process=False, follows_settings=False, steps_through=False, sweeps_k=False,
                                reports_p_q=False, lossy_lane=False, own_cost_table=True, starts_embedded=True, side_by_side=True,
                                forces_tokens=True)

    def __init__(self, base_url: str, tokenizer, *, speculative: bool, eos_ids=(), timeout: float = 120.0):
        self.base_url = base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.held = HeldTokens(tokenizer)  # recovers the ids of tokens the server sent no chunk for
        self.speculative = speculative
        self.eos_ids = frozenset(eos_ids) or eos_ids_of(tokenizer)  # tokens that end a run: its last event says "eos"
        self.timeout = timeout  # seconds to wait for each chunk
        self.final: dict | None = None  # the server's last chunk of the latest run (its totals: tokens, timings, stop_type)

    def request(self, prompt_ids: list[int], max_new_tokens: int) -> dict:
        return {
            "prompt": list(prompt_ids), "n_predict": max_new_tokens, "stream": True,
            "timings_per_token": True,  # the draft counters on every chunk
            "return_tokens": True,  # ids in the final chunk where the server fills them (a streamed run's final chunk has none)
            "temperature": 0.0,  # greedy, like the page's exactness check
            "cache_prompt": False,  # every run processes its prompt, as ours does
        }

    def iter_events(self, prompt_ids: list[int], max_new_tokens: int) -> Iterator[StepEvent]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        steps = StepAssembler(self.engine, self.tokenizer, prompt_ids)
        self.final = None
        where = f"{self.engine} at {self.base_url}"
        cut = StepCutter(where, self.eos_ids, max_new_tokens)
        counters = (0, 0)
        for elapsed, chunk in post_stream(self.engine, self.base_url, "/completion", self.request(prompt_ids, max_new_tokens), self.timeout):
            if chunk.get("stop") is True:
                self.final = chunk
                break
            ids, timings = chunk.get("tokens"), chunk.get("timings")
            if ids == []:  # a chunk with no token (the stream's opening, prompt progress)
                continue
            if not isinstance(ids, list) or not isinstance(timings, dict):
                raise EngineError(f"{where} answered something else: a stream chunk without token ids and timings "
                                  "(is it llama.cpp's llama-server?)")
            counters = draft_counters(timings)
            tokens = self._with_held(chunk, ids, cut.received)
            cut.add(tokens, counters, elapsed, held=len(tokens) - len(ids))
            for step in cut.ready():
                yield self._event(steps, *step, max_new_tokens)
            self._check_lane(where, counters, cut.received)
        self._add_held_tail(cut, counters)
        held = cut.close()
        self._fill(cut, prompt_ids)
        for step in held:
            yield self._event(steps, *step, max_new_tokens)
        if self.speculative and cut.seen == (0, 0) and cut.received >= 4:
            raise EngineError(self._off(where, cut.received))

    def _with_held(self, chunk: dict, ids: list[int], received: int) -> list[int | None]:
        """The chunk's ids, preceded by those of tokens the server held back: it sends no chunk for a
        token that leaves a UTF-8 character unfinished, and the next chunk's position
        (tokens_predicted) shows the gap. Their ids come from the chunk's text (held_tokens.py);
        where that cannot tell, they stay None until the run's end (see _fill)."""
        position = chunk.get("tokens_predicted")
        missing = position - received - len(ids) if isinstance(position, int) else 0
        if missing <= 0:
            return list(ids)
        text = chunk.get("content")
        recovered = self.held.recover(text, ids[-1], missing) if isinstance(text, str) and len(ids) == 1 else None
        return (recovered or [None] * missing) + list(ids)

    def _add_held_tail(self, cut: StepCutter, counters: tuple[int, int]) -> None:
        """Tokens held back at the very end (the run stopped inside a character): the final chunk counts them."""
        final = self.final or {}
        total = final.get("tokens_predicted")
        if isinstance(total, int) and total > cut.received:
            timings = final.get("timings")
            missing = min(total - cut.received, cut.max_new_tokens - cut.received)
            cut.add([None] * missing, draft_counters(timings) if isinstance(timings, dict) else counters, cut.elapsed, held=missing)

    def _event(self, steps: StepAssembler, ids, drafted, accepted, elapsed, max_new_tokens) -> StepEvent:
        last = ids[-1]
        finish = FINISH_EOS if last in self.eos_ids else FINISH_LENGTH if steps.total + len(ids) >= max_new_tokens else None
        return steps.event(ids, drafted, accepted, elapsed, finish)

    def _fill(self, cut: StepCutter, prompt_ids: list[int]) -> None:
        """Put the ids still unknown in place: from the final chunk's list of every generated id where
        the server sends one, else from the server's greedy continuation of the known prefix, asked
        for once (the tokens from the first unknown one to the end)."""
        if not any(None in ids for ids, *_ in cut.done):
            return
        every = (self.final or {}).get("tokens")
        if not isinstance(every, list) or len(every) < sum(len(ids) for ids, *_ in cut.done):
            known = cut.known_prefix()
            every = self.continuation(list(prompt_ids) + known, cut.received - len(known))
        fill(cut.done, every)

    def _greedy(self, prompt_ids: list[int], n: int, **extra) -> dict:
        """One greedy request for `n` tokens after `prompt_ids`, without streaming, the prompt cached."""
        return post_json(self.engine, self.base_url, "/completion", {
            "prompt": prompt_ids, "n_predict": n, "stream": False, "temperature": 0.0, "cache_prompt": True, **extra},
            self.timeout)

    def continuation(self, prompt_ids: list[int], n: int) -> list[int]:
        """The server's next `n` greedy token ids after `prompt_ids`, in one request without streaming."""
        ids = self._greedy(prompt_ids, n, return_tokens=True).get("tokens")
        if not isinstance(ids, list) or len(ids) != n:
            raise EngineError(f"{self.engine} at {self.base_url} held back {n} token(s) (half a UTF-8 character) and "
                              f"did not list their ids when asked again (got {ids!r:.80})")
        return ids

    def forced_predictions(self, prompt_ids: list[int], reference: list[int]) -> list[int]:
        """The server's top-1 next token after the prompt and each prefix of `reference` (teacher
        forcing, specdec.measure.faithfulness): one greedy token per request, the prompt cached by the
        server, so every request after the first runs one new token through the same single-token
        path as its own decoding."""
        return [self.continuation(list(prompt_ids) + list(reference[:i]), 1)[0] for i in range(len(reference))]

    def forced_tops(self, prompt_ids: list[int], reference: list[int], n: int) -> tuple[list[int], list[dict[int, float]]]:
        """forced_predictions, and at each position the server's n most likely tokens with their
        log-probabilities (token -> nats; its `n_probs`, from the softmax of its logits): one request each."""
        predicted, listed = [], []
        for i in range(len(reference)):
            answer = self._greedy(list(prompt_ids) + list(reference[:i]), 1, n_probs=n, return_tokens=True)
            try:
                top = {int(t["id"]): float(t["logprob"]) for t in answer["completion_probabilities"][0]["top_logprobs"]}
                predicted.append(int(answer["tokens"][0]))  # the token it chose, as forced_predictions reads it
            except (KeyError, IndexError, TypeError, ValueError):
                raise EngineError(f"{self.engine} at {self.base_url} listed no log-probabilities or token "
                                  f"(got {answer.get('completion_probabilities')!r:.80})") from None
            listed.append(top)
        return predicted, listed

    def top2(self, prompt_ids: list[int]) -> tuple[list[int], float]:
        """The server's two most likely next tokens after `prompt_ids` and the gap between their
        log-probabilities (nats, which is also the gap between their logits), in one request."""
        answer = self._greedy(prompt_ids, 1, n_probs=2)
        try:
            best = answer["completion_probabilities"][0]["top_logprobs"][:2]
            return [int(t["id"]) for t in best], float(best[0]["logprob"]) - float(best[1]["logprob"])
        except (KeyError, IndexError, TypeError, ValueError):
            raise EngineError(f"{self.engine} at {self.base_url} listed no top-2 log-probabilities "
                              f"(got {answer.get('completion_probabilities')!r:.80})") from None

    def _check_lane(self, where: str, counters: tuple[int, int], total: int) -> None:
        if not self.speculative and counters[0]:
            raise EngineError(f"{where} drafts (draft_n moved), so it is no plain baseline: start the plain lane's server without -md")
        if self.speculative and not counters[0] and total >= SPEC_OFF_AFTER:
            raise EngineError(self._off(where, total))

    def _off(self, where: str, total: int) -> str:
        return (f"{where} has speculation off: draft_n stayed 0 over {total} tokens "
                "(start it with -md DRAFT.gguf --spec-type draft-simple; the default type is none)")


def draft_counters(timings: dict) -> tuple[int, int]:
    """(draft_n, draft_n_accepted) of one chunk's timings; absent until the server's first draft."""
    return int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0))


def eos_ids_of(tokenizer) -> frozenset[int]:
    """Tokens that end a run for this tokenizer: its end-of-sequence token and the chat turn's end."""
    ids = {getattr(tokenizer, "eos_token_id", None)}
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    ids |= {vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>") if t in vocab}
    return frozenset(i for i in ids if i is not None)

