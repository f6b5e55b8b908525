"""The compiled runner: a model's fixed-shape passes captured once per process and replayed.

On a GPU each shape becomes a CUDA graph (torch.cuda.CUDAGraph): the pass's hundreds of kernel
launches replayed in one call, reading the shape's ids buffer and the model's start buffer,
writing into its cache. On a CPU each shape is compiled whole with torch.compile (fullgraph=True,
dynamic=False): there it checks that the passes capture (no graph break, no recompile), and is
measured against the static runner (docs/benchmarks.md). A shape is captured at most once per model
and process, and each capture is timed (StaticModel.capture_s) so a caller that pays for it (a
ZeroGPU call) can count it. A shape or model that cannot be captured runs static: one logged line
says why.

A compiled model's cache and buffers are fixed (its graphs point into them), so it is shared by
the runs of the process one at a time: a run that finds it held, or that does not fit its cache,
runs on a static model of the same weights (StaticModel.claim).
"""

from __future__ import annotations

import contextlib
import logging
import time
import types

import torch

from specdec.core.runners.kv import fixed_pass
from specdec.core.runners.shapes import LARGEST
from specdec.core.runners.static_model import StaticModel

log = logging.getLogger("specdec.runners")
CAPTURED_CONTEXT = 4096  # positions in a compiled model's cache: a prompt and up to MAX_NEW_TOKENS_CAP new tokens
WARMUP = 2  # passes run before a CUDA graph is captured (lazy initialisation happens outside the graph)


def compiled_model(module, vocab_size: int, linear=None) -> StaticModel:
    """The process's compiled StaticModel of this module, made on first use. It is kept on the module
    itself, so it lives exactly as long as the weights it captured."""
    model = module.__dict__.get("_specdec_compiled")
    if model is None:
        model = StaticModel(module, vocab_size, linear, capacity=CAPTURED_CONTEXT)
        model.capturer = Capturer(model.device)
        module.__dict__["_specdec_compiled"] = model
    return model


class Capturer:
    """Captures a compiled model's shapes (each once) and hands the model to one run at a time."""

    def __init__(self, device: torch.device):
        self.device = device
        self.failed: str | None = None  # why capturing stopped; the shapes not captured run static
        self.pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None  # one memory pool for the model's graphs
        if device.type not in ("cuda", "cpu"):
            self.failed = f"nothing captures passes on {device.type}"
            log.warning("specdec: the compiled runner runs static on %s: %s", device.type, self.failed)

    def claim(self, model: StaticModel, owner, positions: int, shapes) -> str | None:
        """Give `model` to `owner` with `shapes` captured; or say why not (None: given)."""
        if model.owner is not None and model.owner is not owner:
            return "another run holds the compiled model"
        if positions + LARGEST > model.fixed_capacity:
            return f"{positions} positions do not fit its captured cache of {model.fixed_capacity}"
        model.owner = owner
        model.reserve(positions)
        self.capture(model, shapes)
        return None

    def capture(self, model: StaticModel, shapes) -> None:
        for tokens, last_only in shapes:
            if (tokens, last_only) in model.captured or self.failed:
                continue
            began = time.perf_counter()
            try:
                make = cuda_graph if self.device.type == "cuda" else compiled_pass
                model.captured[tokens, last_only] = make(model, tokens, last_only, self.pool)
            except Exception as err:  # any failure to capture means: run this model static
                self.failed = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
                log.warning("specdec: the compiled runner could not capture a pass of %d tokens (%s); the model's "
                            "other passes run static", tokens, self.failed)
                return
            model.capture_s[tokens, last_only] = time.perf_counter() - began


@torch.inference_mode()
def cuda_graph(model: StaticModel, tokens: int, last_only: bool, pool):
    """A CUDA graph of the pass over input(tokens): replay() runs it and returns its logits (the
    graph's own output tensor, rewritten by the next replay). Its warm-up passes write at position
    0, before any run's prompt (claim captures before the prefill)."""
    ids = model.input(tokens)
    model.start.fill_(0)
    current = torch.cuda.current_stream(model.device)
    side = torch.cuda.Stream(model.device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            model.pass_now(ids, last_only)
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = model.pass_now(ids, last_only)

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    replay.graph = graph
    return replay


def compiled_pass(model: StaticModel, tokens: int, last_only: bool, pool=None):
    """fixed_pass compiled for this model and shape (fullgraph, static shapes), compiled now: a
    first call, at position 0 before any run's prompt. torch.compile keeps what it compiled per
    code object, so each (model, shape) gets a code object of its own: a second shape is a first
    compile of another function, not a recompile of this one."""
    name = f"fixed_pass_{tokens}{'_last' if last_only else ''}_{id(model):x}"
    own = types.FunctionType(fixed_pass.__code__.replace(co_name=name), fixed_pass.__globals__, name)
    compiled = torch.compile(own, fullgraph=True, dynamic=False)
    ids = model.input(tokens)

    def call() -> torch.Tensor:
        with model.linear() if model.linear else contextlib.nullcontext():
            return compiled(model.model, model.kv, ids, model.start, last_only, model.vocab_size)

    with torch.inference_mode():
        model.start.fill_(0)
        call()
    return call

