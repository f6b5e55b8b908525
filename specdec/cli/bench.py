"""`python -m specdec bench ...` (also `python -m specdec.cli.bench ...`, the same options): the
benchmark of specdec.bench.runner, with its pair, modes and kernels read from the command line."""

from __future__ import annotations

import argparse
import json
import sys

from specdec.bench import runner
from specdec.bench.modes import DEFAULT_MODES
from specdec.bench.report import table
from specdec.bench.runner import bench, load_prompts
from specdec.cli.args import add_bench_command_args, kernel_names, load, runner_names, variant_names
from specdec.core.config import MAX_K
from specdec.models.bundle_chunks import BundleError
from specdec.models.pair import DTYPES


def run_bench(args) -> int:
    if getattr(args, "exact", False):
        args.dtype = "fp32"
    if not 1 <= args.k <= MAX_K:
        raise ValueError(f"k must be an integer in 1..{MAX_K}, got {args.k}")
    if args.repeats < 1 or args.max_new_tokens < 1:
        raise ValueError("repeats and max_new_tokens must be >= 1")
    prompts = load_prompts(args.prompts)
    kernel_names(args), runner_names(args)  # bad names fail before the models load
    pair = load(args)
    set_draft_dtype(pair, getattr(args, "draft_dtype", None))
    modes = [m.strip() for m in getattr(args, "modes", ",".join(DEFAULT_MODES)).split(",") if m.strip()]
    kernels = kernel_names(args)
    report = bench(pair, prompts, modes=modes, variants=variant_names(args, pair), kernels=kernels, runners=runner_names(args, pair), k=args.k,
                   max_new_tokens=args.max_new_tokens, repeats=args.repeats, schedule=getattr(args, "schedule", "constant"),
                   k_policy=getattr(args, "k_policy", None))
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(table(report))
    return 0


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
