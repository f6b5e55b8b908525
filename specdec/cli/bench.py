"""`python -m specdec bench ...` (also `python -m specdec.cli.bench ...`, the same options): the
benchmark of specdec.bench.runner, with its pair, modes and kernels read from the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import nullcontext

from specdec.bench import predictions, runner
from specdec.bench.modes import DEFAULT_MODES, HEAD_DEFAULT_MODES, MODES
from specdec.bench.report import table
from specdec.bench.runner import bench, load_prompts
from specdec.cli.args import (START, add_k_policy_arg, add_kernel_arg, add_lock_arg, add_model_args, add_runner_arg, add_variant_arg,
                              k_policy_of, kernel_names, load, runner_names, variant_names)
from specdec.core.config import MAX_K, GenerationConfig
from specdec.measure.lock import one_measurement
from specdec.models import machine
from specdec.models.bundle_chunks import BundleError
from specdec.models.pair import DTYPES


def add_bench_command_args(p: argparse.ArgumentParser) -> None:
    """Every option of `bench` (also `python -m specdec.cli.bench`); the ones `generate` shares come from specdec.cli.args."""
    from specdec.models.dtypes import DTYPES

    p.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "..", "..", "assets", "bench_prompts.json"))
    add_model_args(p)
    p.add_argument("--k", type=int, default=START.k)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=1, help="alternating rounds per prompt")
    p.add_argument("--json", action="store_true")
    add_variant_arg(p, several=True)
    add_kernel_arg(p, several=True)
    add_runner_arg(p, several=True)
    p.add_argument("--draft-dtype", choices=list(DTYPES), help="the draft model's dtype (default: --dtype)")
    p.add_argument("--exact", action="store_true", help="target in fp32 for every mode (verification without bf16 rounding); draft keeps --draft-dtype")
    p.add_argument("--schedule", choices=["constant", "heuristic"], default="constant", help="K schedule of spec and hf_assisted")
    add_k_policy_arg(p)  # for `spec`, instead of --schedule; hf_assisted keeps --schedule
    p.add_argument("--modes", default=None,
                   help=f"comma-separated, from {', '.join(MODES)}; a draft-model mode may name its variant (spec@int4) "
                        f"(default: {','.join(DEFAULT_MODES)})")
    p.add_argument("--drafter", choices=["model", "head", "lookup", "auto_both"], default="model",
                   help="the default modes: model: " + ",".join(DEFAULT_MODES) + "; head: " + ",".join(HEAD_DEFAULT_MODES)
                        + " (the trained head, docs/head.md); --modes overrides either. With --predictions: who drafts "
                          "(lookup: prompt lookup; auto_both: lookup, else the head or the draft model, whichever the "
                          "cost K policy prices faster; these two only there)")
    p.add_argument("--predictions", action="store_true",
                   help="instead of the modes: per prompt, spec's measured speedup over plain decoding (prompt processing excluded) "
                        "beside the three predictions of specdec.measure.metrics; one draft variant, kernel and runner; "
                        "exit status 1 if the accounting misses the measurement by more than 10%% on a prompt")
    add_lock_arg(p)


def run_bench(args) -> int:
    if getattr(args, "exact", False):
        args.dtype = "fp32"
    if not 1 <= args.k <= MAX_K:
        raise ValueError(f"k must be an integer in 1..{MAX_K}, got {args.k}")
    if args.repeats < 1 or args.max_new_tokens < 1:
        raise ValueError("repeats and max_new_tokens must be >= 1")
    if getattr(args, "predictions", False) and getattr(args, "modes", None):
        raise ValueError("--predictions runs spec against plain decoding: leave out --modes")
    if getattr(args, "drafter", "model") in ("lookup", "auto_both") and not getattr(args, "predictions", False):
        raise ValueError(f"--drafter {args.drafter} is for --predictions; the modes name their drafter themselves")
    prompts = load_prompts(args.prompts)
    kernel_names(args), runner_names(args)  # bad names fail before the models load
    with nullcontext() if getattr(args, "no_lock", False) else one_measurement("python -m specdec bench"):
        pair = load(args)
        set_draft_dtype(pair, getattr(args, "draft_dtype", None))
        if getattr(args, "predictions", False):
            return run_predictions(args, pair, prompts)
        default = HEAD_DEFAULT_MODES if getattr(args, "drafter", "model") == "head" else DEFAULT_MODES
        modes = [m.strip() for m in (getattr(args, "modes", None) or ",".join(default)).split(",") if m.strip()]
        report = bench(pair, prompts, modes=modes, variants=variant_names(args, pair), kernels=kernel_names(args, pair),
                       runners=runner_names(args, pair), k=args.k, max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                       schedule=getattr(args, "schedule", "constant"), k_policy=getattr(args, "k_policy", None))
    print(json.dumps(report, ensure_ascii=False) if args.json else table(report))
    return 0


def run_predictions(args, pair, prompts: list[dict]) -> int:
    """`bench --predictions`: the table (or JSON) of specdec.bench.predictions; 1 if the accounting
    misses the measurement on a prompt."""
    variant = only(variant_names(args, pair), "--draft-variant")
    kernel = only(kernel_names(args, pair), "--target-kernel")
    runner = only(runner_names(args, pair), "--runner")
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k, drafter=getattr(args, "drafter", "model") or "model",
                              draft_variant=variant,
                              target_kernel=kernel, runner=runner, k_policy=k_policy_of(args)).validate()
    rows = predictions.predict(pair, prompts, config)
    if args.json:
        print(json.dumps(predictions.as_json(rows), ensure_ascii=False))
    else:
        print(f"pair {pair.name}, {pair.device} {pair.dtype_name}, drafter {config.drafter}, draft variant {variant}, "
              f"target kernel {kernel}, {runner} runner, "
              f"K = {args.k} ({config.k_policy}), {args.max_new_tokens} new tokens, greedy; "
              f"CPU {machine.cpu_model()} ({' '.join(machine.reported_flags()) or 'no avx2'}), {machine.cores()} cores\n")
        print(predictions.table(rows))
    return 0 if predictions.within_tolerance(rows) else 1


def only(names: list[str], option: str) -> str:
    if len(names) != 1:
        raise ValueError(f"--predictions compares one configuration: {option} takes one name here")
    return names[0]


def set_draft_dtype(pair, name: str | None) -> None:
    """--draft-dtype: cast the draft in place (our stored weights are bf16, so bf16 <-> fp32 loses nothing)."""
    if name and pair.draft is not None:
        pair.draft.to(DTYPES[name])


def main(argv: list[str] | None = None) -> int:
    """`python -m specdec.cli.bench ...` is `python -m specdec bench ...`: the same options (specdec.cli.args)."""
    parser = argparse.ArgumentParser(prog="python -m specdec.cli.bench", description=runner.__doc__.splitlines()[0])
    add_bench_command_args(parser)
    args = parser.parse_args(argv)
    try:
        return run_bench(args)
    except (ValueError, BundleError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
