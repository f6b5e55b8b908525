"""llama.cpp's own pass costs, measured through llama-server itself: one target pass over n tokens
and one draft pass, the numbers that decide whether speculation pays in that engine.

A pass over n tokens: llama-server keeps the prompt's cache between requests (`cache_prompt`), so a
request that repeats a cached prefix and adds n new tokens evaluates exactly those n in one batch,
which is what a verify pass of K+1 = n tokens is; the server's own `timings.prompt_ms` times it, and
`timings.prompt_n` says how many tokens it evaluated (checked: a request that did not reuse the
cache is refused, not counted). A draft pass is the same over one token on a server of the draft
GGUF alone. Sizes are interleaved over the repeats and the median taken, as specdec.measure.passcost does.
"""

from __future__ import annotations

import statistics

from specdec.measure.passcost import PassCosts, filler_ids
from specdec.engines.base import LLAMA_CPP, EngineError
from specdec.engines.server import Progress, ServerProcess, free_port
from specdec.engines.stream import post_stream

SIZES = (1, 2, 3, 4, 6, 8, 12, 16)  # tokens in one target pass, as the cost table of our engine
CONTEXT = 200  # cached positions before each timed pass
REPEATS = 3


def pass_ms(base_url: str, prefix: list[int], new: list[int], timeout: float = 120.0, cached: bool = True) -> float:
    """Milliseconds llama-server took to evaluate `new` after the cached `prefix`, in one batch
    (cached=False: the prefix is not in the cache yet, and this request puts it there)."""
    body = {"prompt": prefix + new, "n_predict": 1, "cache_prompt": True, "temperature": 0, "stream": True}
    last = {}
    for _, chunk in post_stream(LLAMA_CPP, base_url, "/completion", body, timeout):
        last = chunk
    timings = last.get("timings") or {}
    if cached and timings.get("prompt_n") != len(new):
        raise EngineError(f"{LLAMA_CPP} at {base_url} evaluated {timings.get('prompt_n')} prompt tokens where "
                          f"{len(new)} were new: its prompt cache was not reused, so the pass cannot be timed")
    return float(timings["prompt_ms"])


def time_passes(base_url: str, vocab: int, sizes, repeats: int, context: int = CONTEXT,
                tick=None) -> list[float]:
    """Median seconds of a pass over n new tokens after `context` cached ones, for each n in sizes."""
    prefix = filler_ids(vocab, context)
    pass_ms(base_url, prefix, [1], cached=False)  # fills the cache with the prefix (and warms the server up)
    runs = {n: [] for n in sizes}
    salt = 0
    for _ in range(repeats):
        for n in sizes:
            salt += 1
            # New tokens differ from every earlier request's, so only the prefix is ever reused.
            new = [(salt * 104729 + j * 31 + 7) % vocab for j in range(n)]
            runs[n].append(pass_ms(base_url, prefix, new) / 1000)
            if tick:
                tick(1)
    return [statistics.median(runs[n]) for n in sizes]


def measure(target_url: str, draft_url: str | None, vocab: int, sizes=SIZES, repeats: int = REPEATS,
            tick=None) -> PassCosts:
    """llama.cpp's cost table: the target server (plain, no draft) over each size, one draft pass
    on a server of the draft alone (None: not measured)."""
    target_s = time_passes(target_url, vocab, sizes, repeats, tick=tick)
    draft_s = time_passes(draft_url, vocab, (1,), repeats, tick=tick)[0] if draft_url else None
    return PassCosts(tuple(sizes), tuple(target_s), draft_s, CONTEXT, repeats)


def start_draft_server(progress: Progress | None = None) -> ServerProcess:
    """llama-server on the embedded pair's draft GGUF alone: where a draft pass is timed."""
    from specdec.models.bundle import gguf_files
    from specdec.engines.llamacpp import START_TIMEOUT_S, server_argv
    from specdec.engines.llamacpp_build import build

    _, draft = gguf_files()
    port = free_port()
    return ServerProcess("llama.cpp draft", server_argv(build(), draft, port=port), port, timeout_s=START_TIMEOUT_S,
                         progress=progress).start()


def measure_embedded(plain_url: str, vocab: int, progress: Progress | None = None, repeats: int = REPEATS) -> PassCosts:
    """The embedded pair's llama.cpp costs: the target through the plain server at `plain_url`, the
    draft through a server of its own, started for the measurement and stopped after it."""
    with start_draft_server(progress) as draft:
        return measure(plain_url, draft.url, vocab, repeats=repeats)


def embedded_tables(plain_url: str, vocab_size: int) -> dict[str, PassCosts]:
    """The pass costs of the embedded pair's llama.cpp servers under the engine's name, to sit beside
    the target kernels' tables (the theory tab draws each as its own kernel)."""
    return {LLAMA_CPP: measure_embedded(plain_url, vocab_size)}
