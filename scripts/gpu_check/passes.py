"""Passes per model and runner, what they make of each pair (c, verify cost, predicted speedup), and
the capture seconds a fresh ZeroGPU worker's first call would spend (specdec.serving.gpu_budget)."""

from __future__ import annotations

import statistics
import time

from specdec.core.theory import predicted_speedup
from specdec.core.runners.capture import compiled_model
from specdec.measure.passcost import prefilled, time_passes
from specdec.serving.gpu_budget import MARGIN

from .models import DRAFT, PAIRS, shared_vocab, token_ids
from .record import guarded

# The median per-token acceptance (alpha) of the 0.5B bf16 draft with the 1.5B target over the six
# bench prompts on a CPU (docs/benchmarks.md, "The app's three predictions": 0.76 to 1.00).
ALPHA_CPU = 0.90
CHECK_K = (1, 3, 5, 7)
# The shapes the app's default run captures (GenerationConfig: K = 5, fixed): the target's checks in
# the buckets up to K + 1 = 6 (1, 2, 3, 4, 6 tokens, the plain run's decode among them), the draft's
# one-token pass and its two-token catch-up (specdec/core/runners/static_model.py).
DEFAULT_RUN_SHAPES = {"target": 5, "draft": 2}


def time_model(module, runner: str, sizes: list[int], last_only: bool, args) -> dict:
    """Medians (ms) of passes over each size after `args.context` cached positions, and the capture."""
    context = token_ids(args.context, args)
    shapes = [(n, last_only) for n in sizes]
    with prefilled(runner, module, shared_vocab(args), context, max(sizes), shapes) as lm:
        time_passes(lm, context, sizes, 2, last_only=last_only)  # warm-up
        ms = [1000 * s for s in time_passes(lm, context, sizes, args.repeats, last_only=last_only)]
        failed = compiled_model(module, shared_vocab(args)).failed if runner == "compiled" else None
        return {"pass_ms": dict(zip(map(str, sizes), ms)),
                "capture_s": {str(n): s for (n, _), s in getattr(lm, "capture_s", {}).items()},
                "captured": runner == "compiled" and failed is None and bool(lm.captured),
                "capture_failed": failed}


def time_all(models: dict, args, keep) -> dict:
    """Every model under every runner, each under its own guard: keep(key, result) is called after
    each (the record is written there), an entry that failed holds {"error": ...}."""
    out = {}
    for name, module in models.items():
        draft = name == DRAFT
        sizes = [1] if draft else [1, *(k + 1 for k in CHECK_K)]
        for runner in args.runners:
            began = time.perf_counter()
            result, error = guarded(lambda: time_model(module, runner, sizes, draft, args))
            out[f"{name} {runner}"] = result if error is None else {"error": error}
            keep(f"{name} {runner}", out[f"{name} {runner}"])
            shown = error or out[f"{name} {runner}"]["pass_ms"]
            print(f"  {name} {runner}: {shown} ({time.perf_counter() - began:.0f} s)", flush=True)
    return out


def pair_costs(passes: dict, args) -> dict:
    """Per pair and runner whose two models were timed: c, the verify cost of each K, and the
    predicted speedups at ALPHA_CPU."""
    out = {}
    for pair, (target, draft) in PAIRS.items():
        for runner in args.runners:
            t, d = passes[f"{target} {runner}"].get("pass_ms"), passes[f"{draft} {runner}"].get("pass_ms")
            if t is None or d is None:
                out[f"{pair} {runner}"] = {"error": "a model of the pair was not timed"}
                continue
            c = d["1"] / t["1"]
            verify = {k: t[str(k + 1)] / t["1"] for k in CHECK_K}
            out[f"{pair} {runner}"] = {"c": c, "verify_cost": verify,
                                       "predicted_speedup": {k: predicted_speedup(ALPHA_CPU, k, c, verify[k]) for k in CHECK_K}}
    return out


def first_call_capture(passes: dict) -> dict:
    """Per pair: MARGIN x the seconds a default run's shapes take to capture, each shape at the
    median of the shapes this check captured for that model: the figure for gpu_budget's
    CAPTURE_ESTIMATES["compiled"] once a GPU has measured it."""
    def per_shape(name):
        times = passes.get(f"{name} compiled", {}).get("capture_s") or {}
        return statistics.median(times.values()) if times else None

    out = {}
    for pair, (target, draft) in PAIRS.items():
        t, d = per_shape(target), per_shape(draft)
        if t is None or d is None:
            out[pair] = None  # not captured (no compiled runner, or it failed)
            continue
        seconds = DEFAULT_RUN_SHAPES["target"] * t + DEFAULT_RUN_SHAPES["draft"] * d
        out[pair] = {"per_shape_s": {"target": t, "draft": d}, "first_call_capture_s": round(MARGIN * seconds, 2)}
    return out
