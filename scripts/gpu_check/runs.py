"""Whole runs through the engine: the loop's own cost per step, host syncs per step, and the draft's
K passes captured as one graph."""

from __future__ import annotations

import statistics
import time

import torch

from specdec.core.config import GenerationConfig
from specdec.core.runners.static_model import fixed_pass
from specdec.engines.assemble import build_decoding
from specdec.measure.compare import first_difference
from specdec.models.pair import ModelPair

from .models import DRAFT, PAIRS, Chars, shared_vocab, token_ids

SYNC_STEPS = (2, 6)  # the steps whose syncs are counted: after the first two (prompt, first captures), four


def pair_of(models: dict, name: str, args) -> ModelPair:
    target, draft = PAIRS[name]
    return ModelPair(name, models[target], models[draft], Chars(), args.device, args.dtype, chat=False)


def whole_runs(models: dict, passes: dict, args, label: str) -> dict:
    """Per pair: plain and speculative greedy runs (K = args.k) on the loop runner, tokens/s from
    the engine's own clock, seconds per step against what the pass timings account for, and where
    the two texts first differ with the target's top-2 margin there (in bf16 a near-tie may part
    them: Difference.is_tie says whether it is one)."""
    out = {}
    prompt = token_ids(args.prompt_len, args, step=31, offset=7)
    for name, (target, draft) in PAIRS.items():
        pair = pair_of(models, name, args)
        runs = {}
        for mode in ("plain", "spec", "plain", "spec"):  # the second round is the one kept
            config = GenerationConfig(max_new_tokens=args.tokens, k=args.k, drafter="none" if mode == "plain" else "model",
                                      runner=args.loop_runner)
            runs[mode] = list(build_decoding(pair, prompt, config))
        t, d = pass_ms(passes, target, args.loop_runner), pass_ms(passes, draft, args.loop_runner)
        row = {mode: run_figures(events) for mode, events in runs.items()}
        row["speedup"] = row["spec"]["tok_s"] / row["plain"]["tok_s"]
        differ = first_difference(runs["spec"], runs["plain"], args.dtype_name)
        row["first_difference"] = differ.as_dict() if differ else None
        # each step's draft passes and its check, from the pass timings
        steps = [len(e.drafted) * d["1"] + check_ms(t, len(e.drafted) + 1) for e in runs["spec"]]
        row["spec_step_accounted_ms"] = statistics.fmean(steps)
        row["plain_step_accounted_ms"] = t["1"]
        out[name] = row
        print(f"  {label} {name}: {row['speedup']:.2f}x, spec {row['spec']['ms_per_step']:.2f} ms/step "
              f"(accounted {row['spec_step_accounted_ms']:.2f}), acceptance {row['spec']['acceptance']:.2f}", flush=True)
    return out


def pass_ms(passes: dict, model: str, runner: str) -> dict:
    row = passes.get(f"{model} {runner}") or {"error": "not run"}
    if "error" in row:
        raise ValueError(f"the {model} on the {runner} runner was not timed ({row['error']})")
    return row["pass_ms"]


def run_figures(events) -> dict:
    seconds = events[-1].elapsed_s
    return {"tokens": events[-1].total_tokens, "steps": len(events), "tok_s": events[-1].total_tokens / seconds,
            "ms_per_step": 1000 * seconds / len(events),
            "acceptance": sum(e.accepted for e in events) / max(1, sum(len(e.drafted) for e in events))}


def check_ms(timed: dict, n: int) -> float:
    """A check of n tokens from the timed sizes, linear between them (the static runners pad n up
    to their next fixed shape, which the sizes timed here mostly are)."""
    sizes = sorted(int(k) for k in timed)
    above = next((s for s in sizes if s >= n), sizes[-1])
    below = max((s for s in sizes if s <= n), default=sizes[0])
    if above == below:
        return timed[str(above)]
    return timed[str(below)] + (timed[str(above)] - timed[str(below)]) * (n - below) / (above - below)


def sync_counts(models: dict, args, cuda, tokens: int = 32) -> dict:
    """Synchronizing CUDA calls in each of four steady-state steps of a run of the 1.5B pair, K = 5,
    each runner. Run before acceptance is forced: random weights accept almost nothing, so 32 new
    tokens take about 32 steps. Events are read with next(run, None): a run that ends sooner gives
    fewer counts, never an exception."""
    pair = pair_of(models, "1.5b/0.5b", args)
    out = {}
    for runner in args.runners:
        config = GenerationConfig(k=5, max_new_tokens=tokens, runner=runner)
        run = iter(build_decoding(pair, list(range(100, 164)), config))
        counts = []
        for step in range(SYNC_STEPS[1]):
            with cuda.count_syncs() as tally:
                event = next(run, None)
            if event is None:
                break
            if step >= SYNC_STEPS[0]:
                counts.append(tally.count)
        for _ in run:  # to its end, which gives a compiled model back
            pass
        out[runner] = counts
    return out


def draft_graph_of_k(models: dict, args, cuda) -> dict:
    """One graph of the draft's K greedy one-token passes (each feeding its argmax to the next)
    against K replays of the one-pass graph with the same feeding: ms per draft of K, per K. In the
    dry run the compiled runner's pass is torch.compile's and the one graph is its body run again."""
    from specdec.core.runners.capture import compiled_model

    lender = compiled_model(models[DRAFT], shared_vocab(args))
    owner = object()
    lm = lender.claim(owner, args.context + 64, [(1, True)])
    try:
        if not lm.captured:
            return {"failed": lender.failed or "not captured"}
        lm.prefill(torch.tensor(token_ids(args.context, args), device=args.device))
        return {k: time_draft_of_k(lm, k, lender.pool, cuda) for k in (3, 5, 7)}
    finally:
        lender.release(owner)


def time_draft_of_k(lm, k: int, pool, cuda) -> dict:
    ids = lm.input(1)

    def draft_of_k() -> None:
        for _ in range(k):
            logits, _ = fixed_pass(lm.model, lm.kv, ids, lm.start, True, lm.vocab_size)
            ids.copy_(logits.argmax(dim=-1))
            lm.start.add_(1)

    with torch.inference_mode():
        lm.start.fill_(lm.position)
        for _ in range(2):  # warm-up on the current stream's allocator, then capture
            fixed_pass(lm.model, lm.kv, ids, lm.start, True, lm.vocab_size)
        replay = cuda.capture(draft_of_k, pool)
        one_graph = _ms(lambda: (lm.start.fill_(lm.position), replay()), cuda)
        k_replays = _ms(lambda: _k_replays(lm, k), cuda)
    return {"one_graph_ms": one_graph, "k_replays_ms": k_replays}


def _k_replays(lm, k: int) -> None:
    for i in range(k):
        lm.start.fill_(lm.position + i)
        logits, _ = lm.captured[1, True]()
        lm.input(1).copy_(logits.argmax(dim=-1))


def _ms(fn, cuda, reps: int = 20) -> float:
    times = []
    for _ in range(reps):
        cuda.synchronize()
        began = time.perf_counter()
        fn()
        cuda.synchronize()
        times.append(time.perf_counter() - began)
    return 1000 * statistics.median(times)
