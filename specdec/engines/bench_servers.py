"""The bench's modes that read a real engine: a server per mode, plain (no draft) or speculative,
started on the bundle's files and stopped when the bench is done with it.

A real engine's speculative mode is judged against its own plain mode, not against ours. Servers
that fit beside our pair (llama.cpp's, about 1 GB each) stay up for the whole bench and take turns
with our modes; the others (vLLM's, over 12 GB with the draft) run as blocks, one server at a time,
each used for every prompt and round, before the side-by-side ones start."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from specdec.engines import choice
from specdec.engines.choice import remote_source
from specdec.engines.base import LLAMA_CPP, VLLM
from specdec.measure.metrics import summarize

PREFIX = {LLAMA_CPP: "llamacpp", VLLM: "vllm"}  # bench modes <prefix>_plain and <prefix>_spec


@dataclass(frozen=True)
class ServedMode:
    name: str  # the bench's mode, e.g. "llamacpp_spec"
    engine: str  # StepEvent.engine of its events
    speculative: bool  # a server with the draft; else the same target without one


SERVED = {m.name: m for engine, prefix in PREFIX.items()
          for m in (ServedMode(f"{prefix}_plain", engine, False), ServedMode(f"{prefix}_spec", engine, True))}
SERVED_MODES = tuple(SERVED)  # in the order --modes lists them
OWN_PLAIN = {m.name: f"{PREFIX[m.engine]}_plain" for m in SERVED.values() if m.speculative}  # spec mode -> its engine's plain


def side_by_side(mode: str) -> bool:
    """`mode`'s server stays up beside our pair for the whole bench (else it runs as a block)."""
    return choice.capabilities(SERVED[mode].engine).side_by_side


def run_remote(source, prompt_ids: list[int], max_new_tokens: int) -> dict:
    """One streamed request to a real engine's server, timed like ours: the wall time of the whole
    request, from sending it (prompt ids, prefill on the server) to its last chunk."""
    start = time.perf_counter()
    events = list(source.iter_events(prompt_ids, max_new_tokens))
    seconds = time.perf_counter() - start
    m = summarize(events)
    return {"ids": [t for e in events for t in e.emitted], "seconds": seconds,
            "accepted_share": m.accepted_share if m.drafted else None,
            "target_passes": m.target_passes,  # one per step: the server's verify passes, its prompt pass's token included
            "mean_k": m.mean_k if m.drafted else None, "events": events}


class Served:
    """A running server of one mode, and the source that reads it (a vLLM source asks the served
    model's name once, on its first run)."""

    def __init__(self, mode: str, k: int, pair):
        self.mode = SERVED[mode]
        module = choice.server_module(self.mode.engine)
        self.server = module.start_server(module.SPECULATIVE if self.mode.speculative else module.PLAIN, k=k)
        self.source = remote_source(self.mode.engine, self.server.url, pair.tokenizer, speculative=self.mode.speculative,
                                    eos_ids=pair.eos_ids)

    def run(self, prompt_ids: list[int], max_new_tokens: int) -> dict:
        return run_remote(self.source, prompt_ids, max_new_tokens)

    def stop(self) -> None:
        self.server.stop()


def run_blocks(pair, encoded: list[list[int]], modes, k: int, max_new_tokens: int, repeats: int, warmup_tokens: int,
               log) -> dict:
    """(prompt index, mode) -> the runs of each mode among `modes` whose server runs as a block: one
    server at a time, started, warmed up with one short run, used for every prompt and round, stopped."""
    out = {}
    for mode in (m for m in modes if runs_as_block(m)):
        log(f"starting {choice.label(SERVED[mode].engine)} for {mode} (minutes)")
        served = Served(mode, k, pair)
        try:
            served.run(encoded[0], warmup_tokens)
            for i, prompt_ids in enumerate(encoded):
                out[i, mode] = [served.run(prompt_ids, max_new_tokens) for _ in range(repeats)]
        finally:
            served.stop()
    return out


@contextlib.contextmanager
def servers_beside(pair, modes, k: int):
    """mode -> Served for the modes among `modes` whose servers fit beside our pair, all up for the
    whole bench, stopped at the end."""
    servers = {}
    try:
        for mode in modes:
            if mode in SERVED and side_by_side(mode):
                servers[mode] = Served(mode, k, pair)
        yield servers
    finally:
        for served in servers.values():
            served.stop()


def runs_as_block(mode: str) -> bool:
    """`mode` is a real engine's whose server runs as a block, one at a time (its runs come from run_blocks)."""
    return mode in SERVED and not side_by_side(mode)
