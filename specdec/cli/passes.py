"""`python -m specdec passes`: what one pass costs on this machine, as the runners run it.

Per runner, target kernel and draft variant: the target's pass over each of `--sizes` tokens (a
decode step is 1, the check of K drafts K + 1) and the draft's one-token pass (last row only, as
the drafter asks), after a cache of `--context` positions. Every model and size is timed once a
round, in turn (specdec.measure.passcost.time_rounds), so load from other processes falls on all
of them alike; the figures are medians of `--repeats` rounds, and every ratio is of two figures
of the same run. A compiled runner's capture comes first and is reported apart (what a process
pays once). `--without-products` also times each pass with its matrix products replaced by zeros:
the difference is what the products cost in a real pass. `--invariance-cost` also times each
batch-invariant target's passes with batch invariance undone (torch's packed sdpa, fp32 products
on BLAS; specdec/kernels/batch_invariant.py): what the invariance costs. `--drafter head` times the
trained head's draft step beside each target kernel (its kernel follows the target's, as in a run).
"""

from __future__ import annotations

import json
import os
import statistics
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass

from specdec.cli.args import add_lock_arg, add_model_args, kernel_names, load, runner_names, variant_names
from specdec.cli.passes_table import tables
from specdec.core.variant_names import variant_parts
from specdec.measure.lock import one_measurement
from specdec.measure.passcost import Lane, filler_ids, no_products, prefilled, time_rounds


@dataclass(frozen=True)
class Key:
    model: str  # "target" or "draft"
    name: str  # its target kernel or draft variant
    runner: str
    products: bool = True  # False: the same passes with every matrix product replaced by zeros
    undone: bool = False  # True: the same passes with batch invariance undone (--invariance-cost)


def add_passes_command(sub) -> None:
    p = sub.add_parser("passes", help="time target passes over n tokens and draft passes, per runner, target kernel and draft variant")
    add_model_args(p)
    p.add_argument("--runner", default=None, help="comma-separated: eager, static, compiled (default: the measured default "
                                                  "here); each runner's times are also given over the first's")
    p.add_argument("--target-kernel", default="dense", help="comma-separated: dense, int8, q4k, w8a8, w4a8 (default: dense, the target "
                                                            "as loaded; bf16 is read as dense); each decode step is also given over the "
                                                            "first kernel's")
    p.add_argument("--draft-variant", default=None, help="comma-separated draft variants, e.g. dense,int4,w8a8-v32k (default: "
                                                         "the measured default here)")
    p.add_argument("--sizes", default="1,6", help="tokens in the timed target passes (1: a decode step; K+1: the check of K drafts)")
    p.add_argument("--context", type=int, default=200, help="positions in the cache while timing")
    p.add_argument("--repeats", type=int, default=7, help="rounds (medians over them)")
    p.add_argument("--without-products", action="store_true",
                   help="also time each pass with its matrix products replaced by zeros (eager and static runners)")
    p.add_argument("--invariance-cost", action="store_true",
                   help="also time each batch-invariant target's passes with batch invariance undone (eager and static runners)")
    p.add_argument("--drafter", default="model", help="comma-separated: model (the draft variants' passes), head (the trained "
                                                      "head's draft step beside each target kernel; docs/head.md). Default: model")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_lock_arg(p)
    p.set_defaults(func=run_passes)


def sizes_of(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(dict.fromkeys(int(n) for n in text.split(",") if n.strip()))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise ValueError(f"sizes must be positive integers separated by commas, got {text!r}")
    return sizes


def run_passes(args) -> int:
    sizes, runners, kernels = sizes_of(args.sizes), runner_names(args), kernel_names(args)  # bad input fails before loading
    drafters = drafters_of(args.drafter)
    for name in (args.draft_variant or "").split(","):
        if name.strip():
            variant_parts(name.strip())
    if args.context < 1 or args.repeats < 1:
        raise ValueError("context and repeats must be >= 1")
    check_runners(runners, args)
    with nullcontext() if args.no_lock else one_measurement("python -m specdec passes"):
        pair = load(args)
        runners = check_runners(runner_names(args, pair), args)  # the measured default, once the pair is loaded
        with_model = "model" in drafters and pair.draft is not None
        variants = list(dict.fromkeys(variant_names(args, pair))) if with_model else []
        heads = [head_entry(pair, k) for k in kernels] if "head" in drafters else []  # before the rounds: no head fails fast
        result = measure(pair, runners, kernels, variants, sizes, args) | {"heads": heads}
    print(json.dumps(result, ensure_ascii=False) if args.json else tables(result))
    return 0


def drafters_of(text: str) -> list[str]:
    drafters = [d.strip() for d in text.split(",") if d.strip()]
    if not drafters or set(drafters) - {"model", "head"}:
        raise ValueError(f"drafter must be model, head or both (comma-separated), got {text!r}")
    return drafters


def check_runners(runners: list[str], args) -> list[str]:
    for option, on, why in (("--without-products", args.without_products, "the products"),
                            ("--invariance-cost", args.invariance_cost, "the attention and products")):
        if on and "compiled" in runners:
            raise ValueError(f"{option} times eager and static passes: a compiled pass runs {why} it captured")
    return runners


def head_entry(pair, target_kernel: str) -> dict:
    """The head's drafts beside `target_kernel`: its kernel, the median seconds of each further draft
    and of the first of a step (after the caches were emptied, as a target pass leaves them), or
    ValueError when the pair is offered no head."""
    from specdec.engines.assemble import head_kernel, head_source
    from specdec.kernels.target_kernels import kernel_target
    from specdec.measure.cost_table import CONTEXT, HEAD_REPEATS
    from specdec.measure.passcost import time_head_step
    from specdec.measure.stream_rate import streamed_bytes

    streamed = streamed_bytes(kernel_target(pair, target_kernel))  # what the target's pass before the first draft reads
    cost = time_head_step(head_source(pair, target_kernel), pair.dtype, pair.device, CONTEXT, HEAD_REPEATS, streamed)
    return {"target_kernel": target_kernel, "head_kernel": head_kernel(target_kernel), "median_s": cost.step_s,
            "first_s": cost.first_s}


def measure(pair, runners, kernels, variants, sizes, args) -> dict:
    """Every lane's passes timed in rounds; the medians and what the tables need."""
    from specdec.kernels.batch_invariant import is_batch_invariant
    from specdec.kernels.target_kernels import kernel_target
    from specdec.kernels.variants import draft_model, resident_gb
    from specdec.measure.row_invariance import as_loaded
    from specdec.measure.stream_rate import read_rate, streamed_bytes
    from specdec.models.machine import machine_info

    context = filler_ids(pair.vocab_size, args.context)
    modules = {("target", k): kernel_target(pair, k) for k in kernels} | {("draft", v): draft_model(pair, v) for v in variants}
    lanes, captured = {}, []
    with ExitStack() as stack:
        for runner in runners:
            for (model, name), module in modules.items():
                shapes = [(n, False) for n in sizes] if model == "target" else [(1, True)]
                lm = stack.enter_context(prefilled(runner, module, pair.vocab_size, context, max(sizes), shapes))
                captured += [{"model": model, "name": name, "runner": runner, "tokens": n, "seconds": s}
                             for (n, _), s in getattr(lm, "capture_s", {}).items()]
                own = tuple(sizes) if model == "target" else (1,)
                lanes[Key(model, name, runner)] = Lane(lm, own, last_only=model == "draft")
                if args.without_products:
                    lanes[Key(model, name, runner, False)] = Lane(lm, own, model == "draft", lambda m=module: no_products(m))
                if args.invariance_cost and model == "target" and is_batch_invariant(module):
                    lanes[Key(model, name, runner, undone=True)] = Lane(lm, own, False, lambda m=module, lm=lm: as_loaded(m, [lm]))
        feed = (context * (max(sizes) // len(context) + 1))[: max(sizes)]
        time_rounds(lanes, feed, 1)  # a warm-up round: first passes pay for allocations
        runs = time_rounds(lanes, feed, args.repeats)
    passes = [{"model": key.model, "name": key.name, "runner": key.runner, "products": key.products,
               "invariance_undone": key.undone, "tokens": n,
               "median_s": statistics.median(runs[key, n]), "runs_s": runs[key, n]} for key, lane in lanes.items() for n in lane.sizes]
    return {"pair": pair.name, "machine": machine_info(pair), "context": args.context, "repeats": args.repeats,
            "runners": runners, "kernels": kernels, "variants": variants, "sizes": list(sizes), "forced_paths": forced_paths(),
            "resident_gb": {f"{model} {name}": resident_gb(m) for (model, name), m in modules.items()},
            "streamed_gb": {k: streamed_bytes(modules["target", k]) / 1e9 for k in kernels},
            "read_gbs": read_rate(pair.device) / 1e9,
            "capture_s": captured, "passes": passes}


def forced_paths() -> dict[str, str]:
    """The kernels' instruction-set paths forced by environment variable for this run (e.g.
    SPECDEC_W4A8_PATH=avx2 on an AVX-512 CPU), so that the figures say which path they timed."""
    names = ("SPECDEC_W8A8_PATH", "SPECDEC_W4A8_PATH", "SPECDEC_ATTENTION_PATH")
    return {name: os.environ[name] for name in names if os.environ.get(name, "").strip()}
