"""The compiled runner: a model's fixed-shape passes captured once per process and replayed, and
who holds them.

On a GPU each shape becomes a CUDA graph (torch.cuda.CUDAGraph): the pass's hundreds of kernel
launches replayed in one call, reading the shape's ids buffer and the model's start buffer,
writing into its cache. On a CPU each shape is compiled whole with torch.compile (fullgraph=True,
dynamic=False): there it checks that the passes capture (no graph break, no recompile), and is
measured against the static runner (docs/benchmarks.md). A shape is captured at most once per model
and process, and each capture is timed (StaticModel.capture_s) so a caller that pays for it (a
ZeroGPU call) can count it. A shape or model that cannot be captured runs static: one logged line
says why.

A compiled model's cache and buffers are fixed (its graphs point into them), so it is lent to the
runs of the process one at a time (CompiledModels, the one place that knows who holds which): a
run that finds it held, or that does not fit its cache, runs on a static model of the same weights.
"""

from __future__ import annotations

import contextlib
import logging
import time
import types

import torch

from specdec.core.runners.static_model import LARGEST, StaticModel, fixed_pass

log = logging.getLogger("specdec.runners")
# Cache sizes of compiled models (positions): a run takes the smallest that holds it. A check attends
# over the whole cache (its size is part of the captured shape), so a cache far larger than the run
# would cost every pass: on a GPU the repeated keys and values of a 7B's 28 layers at 4096 positions
# are some 1.6 GB of memory traffic per check.
CAPTURED_CONTEXTS = (512, 1024, 2048, 4096, 8192)
WARMUP = 2  # passes run before a CUDA graph is captured (lazy initialisation happens outside the graph)


def compiled_model(module, vocab_size: int, linear=None) -> "CompiledModels":
    """The process's compiled models of this module and logit width, made on first use. They are
    kept on the module itself, so they live exactly as long as the weights they captured."""
    families = module.__dict__.setdefault("_specdec_compiled", {})  # logit columns kept -> CompiledModels
    if vocab_size not in families:
        families[vocab_size] = CompiledModels(module, vocab_size, linear)
    return families[vocab_size]


class CompiledModels:
    """A module's compiled StaticModels, one per cache size (CAPTURED_CONTEXTS), each captured shape
    by shape as runs need them and lent to one run at a time (the ModelLender of the compiled runner)."""

    def __init__(self, module, vocab_size: int, linear=None):
        self.module, self.vocab_size, self.linear = module, vocab_size, linear
        self.device = module.device
        self.models: dict[int, StaticModel] = {}  # cache size -> its compiled model
        self.owners: dict[int, object] = {}  # cache size -> the run holding that model
        self.failed: str | None = None  # why capturing stopped; the shapes not captured run static
        self.pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" else None  # one memory pool for the graphs
        if self.device.type not in ("cuda", "cpu"):
            self.failed = f"nothing captures passes on {self.device.type}"
            log.warning("specdec: the compiled runner runs static on %s: %s", self.device.type, self.failed)

    def claim(self, owner, positions: int, shapes) -> StaticModel:
        """The smallest compiled model that holds the run, its `shapes` captured now (before the
        run's clock); a static model of the same weights where none is free or fits (one line says why)."""
        size = next((c for c in CAPTURED_CONTEXTS if positions + LARGEST <= c), None)
        reason = (f"{positions} positions exceed the largest captured cache ({CAPTURED_CONTEXTS[-1]})" if size is None
                  else "another run holds the compiled model" if self.owners.get(size, owner) is not owner else None)
        if reason is not None:
            log.warning("specdec: this run of the compiled runner runs static: %s", reason)
            twin = StaticModel(self.module, self.vocab_size, self.linear)
            twin.reserve(positions)
            return twin
        model = self.models.get(size) or self.models.setdefault(size, StaticModel(self.module, self.vocab_size, self.linear, size))
        self.owners[size] = owner
        model.reserve(positions)
        self.capture(model, shapes)
        return model

    def release(self, owner) -> None:
        for size in [s for s, held_by in self.owners.items() if held_by is owner]:
            del self.owners[size]

    @property
    def capture_s(self) -> dict[tuple[int, int, bool], float]:
        """Seconds each shape took to capture, by (cache size, tokens, last row only)."""
        return {(size, *shape): s for size, model in self.models.items() for shape, s in model.capture_s.items()}

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
    """A CUDA graph of the pass over input(tokens): replay() runs it and returns its (logits,
    features) (the graph's own output tensors, rewritten by the next replay). Its warm-up passes
    write at position 0, before any run's prompt (claim captures before the prefill)."""
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
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        out = model.pass_now(ids, last_only)

    def replay() -> tuple[torch.Tensor, torch.Tensor]:
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

    def call() -> tuple[torch.Tensor, torch.Tensor]:
        with model.linear() if model.linear else contextlib.nullcontext():
            return compiled(model.model, model.kv, ids, model.start, last_only, model.vocab_size)

    with torch.inference_mode():
        model.start.fill_(0)
        call()
    return call
