"""What one forward pass costs on the machine at hand: the target over 1, 2, 4, ... 32 tokens, one
draft pass, the draft's first pass of a step over as many tokens as it catches up on
(time_draft_feeds), and the drafts of a trained head (time_head_step: the first of a step, and each
further one). A drafter's first pass of a step is timed after the caches were emptied
(specdec.measure.cold), as a run pays it: the target's pass before it has just streamed about a
gigabyte through them; its further passes find their weights cached. Speculative
decoding pays where checking K+1 tokens costs about one decode step (memory-bound decoding: the
weights are read once per pass, however many tokens it scores).

Timing (time_rounds, the one timing loop of the cost table and of `python -m specdec passes`):
the same prefilled cache for every pass (each pass is cropped off again), models and sizes
interleaved over the repeats so that load from other processes spreads over all of them, the
median per size. The passes run as a run's runner runs them (specdec.core.runners: eager, static,
compiled), so a cost table is its runner's.
"""

from __future__ import annotations

import itertools
import statistics
import time
import types
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Callable, ContextManager

import torch

from specdec.core.runners import runner_model
from specdec.core.runners.static_model import DRAFT_SHAPES
from specdec.kernels.cpu_linear import linear_for
from specdec.measure.cold import CacheEmptier
from specdec.measure.stream_rate import process_read_rate, streamed_bytes

SIZES = (1, 2, 4, 8, 16, 32)
MAX_CONTEXT = 256  # positions prefilled before timing (the prompt, cut to its last tokens)


@dataclass(frozen=True)
class PassCosts:
    sizes: tuple[int, ...]  # tokens in one target pass
    target_s: tuple[float, ...]  # median seconds of one target pass over that many tokens
    draft_s: float | None  # median seconds of one one-token draft-model pass, weights cached: each after the first of a step (None: no draft model)
    context: int  # positions in the cache while timing
    repeats: int
    head_s: float | None = None  # median seconds of a further draft of the run's trained head, weights cached (None: not timed)
    head_first_s: float | None = None  # median seconds of the head's first draft of a step, after a target pass (None: head_s)
    overhead_s: float | None = None  # seconds a drafting step spends outside its passes (None: not measured; k_policy.OVERHEAD_STEPS then)
    draft_feed_s: tuple[float, ...] | None = None  # median seconds of a step's first draft-model pass, feeding n tokens (n in `sizes`) after the caches were emptied (None: not timed)
    streamed_bytes: int | None = None  # bytes a decode step of the target reads at least (specdec.measure.stream_rate)
    read_rate: float | None = None  # bytes a second this machine reads from memory (stream_rate.process_read_rate: once per process)

    def target_pass_s(self, n: float) -> float:
        """Seconds of a pass over n tokens, linear between (and beyond) the measured sizes."""
        return read_in_order(self.sizes, self.target_s, n)

    def draft_pass_s(self, n: float) -> float | None:
        """Seconds of the draft model's first pass of a step, which feeds n tokens and drafts after the
        last: it catches up on every token the draft model has not seen (1 after a step it drafted;
        the target's tokens of the plain and lookup steps since), and finds its weights pushed out of
        the caches by the target's pass. Never below a further one-token pass. Where the feeds were
        not timed, the target's own growth with n stands in. None: the pair has no draft model."""
        if self.draft_s is None:
            return None
        if self.draft_feed_s is not None:
            return max(read_in_order(self.sizes, self.draft_feed_s, max(n, 1)), self.draft_s)
        return self.draft_s * self.target_pass_s(max(n, 1)) / self.target_pass_s(1)

    @property
    def decode_step_s(self) -> float:
        return self.target_pass_s(1)

    def verify_cost(self, k: int) -> float:
        """A (K+1)-token pass in decode steps."""
        return self.target_pass_s(k + 1) / self.decode_step_s

    @property
    def limit_s(self) -> float | None:
        """The decode step's physical limit: its bytes over the memory's read rate (None: not measured)."""
        return self.streamed_bytes / self.read_rate if self.streamed_bytes and self.read_rate else None

    @property
    def c(self) -> float | None:
        """One draft pass in decode steps."""
        return self.draft_s / self.decode_step_s if self.draft_s is not None else None


def read_in_order(sizes: tuple[int, ...], seconds: tuple[float, ...], n: float) -> float:
    """Seconds of a pass over n tokens from passes timed over `sizes`, linear between (and beyond)
    them. A pass over more tokens does all the work of one over fewer, so a size timed faster than a
    smaller one (noise: a 2-token check timed at 0.96 of the decode step it contains) is read at the
    smaller's time: the cost policy must not see a check cheaper than a plain step and draft on it
    for free."""
    times = list(itertools.accumulate(seconds, max))
    if len(sizes) == 1:
        return times[0]
    i = next((j for j in range(1, len(sizes)) if n <= sizes[j]), len(sizes) - 1)
    (n0, t0), (n1, t1) = (sizes[i - 1], times[i - 1]), (sizes[i], times[i])
    return max(t0 + (t1 - t0) * (n - n0) / (n1 - n0), 0.0) if n1 != n0 else t0


def filler_ids(vocab_size: int, n: int) -> list[int]:
    """n token ids spread over the vocabulary, for a timing to feed: a pass costs the same whichever
    tokens it reads."""
    return [(i * 7919 + 13) % vocab_size for i in range(n)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Lane:
    """One model's passes in a timing: the sizes it is timed over, whether it asks for the last
    row's logits only (a draft pass), what each round of its passes runs inside, and what runs
    before each pass, untimed (emptying the caches, for a step's first draft pass)."""

    model: object  # a runner's model (specdec.core.runners): forward, crop, length, device
    sizes: tuple[int, ...]
    last_only: bool = False
    around: Callable[[], ContextManager] = nullcontext
    before: Callable[[], None] | None = None


def time_rounds(lanes: dict, ids: list[int], repeats: int, tick=None) -> dict[tuple, list[float]]:
    """Seconds of every pass, by (lane key, n): each round times every lane's sizes in turn, so
    load from other processes spreads over all of them. Each pass feeds n of `ids` after the
    cached positions, and the cache is cropped back after it. tick(): called after each pass."""
    feeds = {}
    runs: dict[tuple, list[float]] = {(key, n): [] for key, lane in lanes.items() for n in lane.sizes}
    for _ in range(repeats):
        for key, lane in lanes.items():
            model, base = lane.model, lane.model.length
            feed = feeds.setdefault(model.device, torch.tensor(ids, device=model.device))
            with lane.around():
                for n in lane.sizes:
                    if lane.before is not None:
                        lane.before()
                    _sync(model.device)
                    start = time.perf_counter()
                    model.forward(feed[:n], last_only=lane.last_only)
                    _sync(model.device)
                    runs[key, n].append(time.perf_counter() - start)
                    model.crop(base)
                    if tick is not None:
                        tick()
    return runs


def time_passes(model, ids: list[int], sizes, repeats: int, last_only: bool = False, tick=None, before=None) -> list[float]:
    """Median seconds of a pass over n of `ids` after the cached positions, for each n in sizes
    (ids: at least max(sizes) tokens); before(): run ahead of each pass, untimed."""
    runs = time_rounds({0: Lane(model, tuple(sizes), last_only, before=before)}, ids, repeats, tick)
    return [statistics.median(runs[0, n]) for n in sizes]


def products(module) -> list:
    """The matrix products of `module`: each leaf layer with `out_features` (nn.Linear and this
    project's quantized layers)."""
    return [m for m in module.modules() if hasattr(m, "out_features") and next(m.children(), None) is None]


@contextmanager
def no_products(module):
    """Every matrix product in `module` (each leaf layer with `out_features`: nn.Linear and this
    project's quantized layers) returns zeros of its output shape instead: what a pass costs then
    is everything else (attention, norms, rotary, the cache, Python). Restored on leaving."""
    layers = products(module)
    for layer in layers:
        layer.forward = types.MethodType(_zeros, layer)  # the instance's attribute shadows its class's forward
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def _zeros(layer, x: torch.Tensor) -> torch.Tensor:
    return x.new_zeros(*x.shape[:-1], layer.out_features)  # (..., out)


def passes_to_time(sizes, repeats: int, with_draft: bool) -> int:
    """How many timed passes measure_models makes (the length of its progress bar)."""
    draft_passes = len(sizes) + 1  # the first passes of a step over each size, and the further one-token pass
    return repeats * (len(sizes) + (draft_passes if with_draft else 0))


def measure_models(target, draft, vocab_size: int, context_ids: list[int], sizes=SIZES, repeats: int = 3, tick=None,
                   runner: str = "eager") -> PassCosts:
    """Time passes of these target and draft modules (draft may be None) after a cache filled with
    (the end of) context_ids: the target over each size; the draft's first pass of a step over each
    size, after as many bytes as the target's pass streams were read, and its further one-token
    pass; all run by `runner` (a compiled runner's shapes are captured first, outside the timing)."""
    (alone,) = measure_targets({0: target}, vocab_size, context_ids, sizes, repeats, tick, runner).values()
    if draft is None:
        return alone
    context = list(context_ids[-MAX_CONTEXT:])
    feeds = time_draft_feeds(draft, vocab_size, context, tuple(sizes), repeats, tick, runner, alone.streamed_bytes)
    draft_s = time_draft(draft, vocab_size, context, repeats, tick, runner)
    return replace(alone, draft_s=draft_s, draft_feed_s=tuple(feeds))


def measure_targets(targets: dict, vocab_size: int, context_ids: list[int], sizes=SIZES, repeats: int = 3, tick=None,
                    runner: str = "eager") -> dict:
    """Time the passes of several target modules (targets: key -> module) after a cache filled with
    (the end of) context_ids, together: every round times each one's sizes in turn (time_rounds), so
    a slow spell of the machine falls on all of them alike and their tables compare. Timed one
    after another, a spell of a few seconds could slow one kernel's whole table alone and turn the
    choice between two kernels (specdec.serving.defaults_here). Returns key -> PassCosts without a
    draft."""
    if not context_ids:
        raise ValueError("pass costs need a context of at least one token")
    context = list(context_ids[-MAX_CONTEXT:])
    feed = (context * (max(sizes) // len(context) + 1))[: max(sizes)]  # any real tokens do: cost does not depend on which
    with ExitStack() as stack:
        lanes = {key: Lane(stack.enter_context(prefilled(runner, module, vocab_size, context, max(sizes), [(n, False) for n in sizes])),
                           tuple(sizes)) for key, module in targets.items()}
        for lane in lanes.values():
            time_passes(lane.model, feed, (1,), 1)  # a warm-up pass: first calls pay for allocations
        runs = time_rounds(lanes, feed, repeats, tick)
    out = {}
    for key, module in targets.items():
        limit = {"streamed_bytes": streamed_bytes(module), "read_rate": process_read_rate(next(module.parameters()).device)}
        target_s = tuple(statistics.median(runs[key, n]) for n in sizes)
        out[key] = PassCosts(tuple(sizes), target_s, None, len(context), repeats, **limit)
    return out


def time_draft(draft, vocab_size: int, context_ids: list[int], repeats: int = 3, tick=None, runner: str = "eager") -> float:
    """Median seconds of one one-token pass of the draft module after a cache filled with (the end
    of) context_ids, run by `runner`, asking for the last logits only (as a drafter does), one after
    another: a step's passes after its first, which find the draft's weights in the caches."""
    context = list(context_ids[-MAX_CONTEXT:])
    with prefilled(runner, draft, vocab_size, context, 1, DRAFT_SHAPES[:1]) as draft_lm:
        time_passes(draft_lm, context, (1,), 1, last_only=True)  # a warm-up pass: first calls pay for allocations
        (seconds,) = time_passes(draft_lm, context, (1,), repeats, last_only=True, tick=tick)
    return seconds


def time_draft_feeds(draft, vocab_size: int, context_ids: list[int], sizes: tuple[int, ...], repeats: int = 3, tick=None,
                     runner: str = "eager", streamed: int | None = None) -> list[float]:
    """Median seconds of the draft model's first pass of a step, feeding n tokens and asking for the
    last logits (its catch-up: specdec.core.proposers.model), for each n in sizes, run by `runner`
    in the shapes a run claims (a catch-up longer than those runs as the runner runs it then).
    Each pass is timed after as many bytes as the target's pass streams were read (`streamed`;
    None: enough to empty the caches), as a run's target pass leaves them."""
    context = list(context_ids[-MAX_CONTEXT:])
    feed = (context * (max(sizes) // len(context) + 1))[: max(sizes)]
    with prefilled(runner, draft, vocab_size, context, max(sizes), DRAFT_SHAPES) as draft_lm:
        time_passes(draft_lm, feed, (1,), 1, last_only=True)  # a warm-up pass: first calls pay for allocations
        empty_caches = CacheEmptier(draft_lm.device, streamed)
        return time_passes(draft_lm, feed, sizes, repeats, last_only=True, tick=tick, before=empty_caches)


@dataclass(frozen=True)
class DraftCost:
    """What a drafter's drafts cost: the first of a step, with the caches emptied by the target's
    pass (the trained head's also reads the pairs the check kept), and each further one, its weights
    still cached."""

    first_s: float
    step_s: float


def time_head_step(source, dtype: torch.dtype, device: torch.device, context: int, repeats: int,
                   streamed: int | None = None) -> DraftCost:
    """Median seconds of a trained head's draft (source: a HeadSource) as a run makes it: one pair
    through its layer over its own cache of `context` positions, then its logits and
    probabilities, the top one read. The first draft of a step is timed after as many bytes as the
    target's pass streams (`streamed`; None: enough to empty the caches) were read
    (specdec.measure.cold: a run's target pass has just streamed its weights through them), the
    further ones without. The head drafts with its own pass, not the draft model's, so its cost
    is timed apart."""
    run = source.make()
    hidden = run.head.shape.hidden
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(context, hidden, generator=gen).to(device, dtype)  # (context, H): any values cost the same
    ids = torch.tensor(filler_ids(source.vocab_size, context), device=device)  # (context,)
    feature = run.extend(feats[:-1], ids[1:])  # (1, H)
    empty_caches = CacheEmptier(device, streamed)
    times: dict[bool, list[float]] = {True: [], False: []}  # cold -> seconds
    for round_ in range(repeats + 2):
        for cold in (True, False):
            if cold:
                empty_caches()
            start = time.perf_counter()
            logits = run.logits(run.step(feature, ids[-1:]))  # (1, V)
            torch.softmax(logits.float(), dim=-1).max().item()  # read: a GPU's work is done when this returns
            if round_ >= 2:  # the first rounds pay for allocations
                times[cold].append(time.perf_counter() - start)
            run.crop(context - 1)
    return DraftCost(statistics.median(times[True]), statistics.median(times[False]))


@contextmanager
def prefilled(runner: str, module, vocab_size: int, context: list[int], room: int, shapes):
    """The module as `runner` runs it (as a run would: linear_for's F.linear), its cache filled with
    `context`; a compiled model is claimed for the timing and given back after."""
    lender = runner_model(runner, module, vocab_size, linear_for(module))
    owner = object()
    lm = lender.claim(owner, len(context) + room, shapes)
    try:
        lm.prefill(torch.tensor(context, device=lm.device))
        yield lm
    finally:
        lender.release(owner)


def measure(pair, context_ids: list[int], sizes=SIZES, repeats: int = 3) -> PassCosts:
    """Time the pair's target and (stock) draft passes after a cache filled with (the end of) context_ids."""
    return measure_models(pair.target, pair.draft, pair.vocab_size, context_ids, sizes, repeats)


def time_decode_step(decoding, repeats: int = 3) -> float | None:
    """A plain decode step, timed on a finished run's own target cache (no second prefill): the
    decode step to compare with when plain decoding was not run. None if the run made no step."""
    seq, target = decoding.seq, decoding.target
    if target.length != len(seq) - 1 or not seq:
        return None
    (seconds,) = time_passes(target, seq[-1:], (1,), repeats)
    return seconds
