"""The check's options and its sections, in the order they run."""

from __future__ import annotations

import argparse
import os

import torch

from specdec.kernels.attention import attention_for
from specdec.models.dtypes import DTYPES

from . import attention, parity, passes, runs
from . import cuda as cuda_calls
from . import models as made
from .record import Record
from .report import print_table

RUNNERS = ("eager", "static", "compiled")


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.gpu_check", description="The GPU check (scripts/gpu_check/__init__.py).")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--layers", type=int, default=None, help="override every model's depth (e.g. 2 for a quick CPU try)")
    p.add_argument("--tiny", action="store_true", help="toy widths of the same structure (the dry run's test)")
    p.add_argument("--runners", default=",".join(RUNNERS))
    p.add_argument("--loop-runner", default="compiled", help="the runner of the whole runs")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--context", type=int, default=200, help="cached positions while timing passes")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", default=None, help="the JSON record (default: $OUT/gpu_check.json when $OUT is set)")
    args = p.parse_args(argv)
    args.device, args.dtype_name, args.dtype = torch.device(args.device), args.dtype, DTYPES[args.dtype]
    args.runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    if args.runners[0] != "eager" or args.loop_runner not in args.runners:
        p.error("--runners must start with eager (the reference) and include --loop-runner")
    if args.k not in passes.CHECK_K:
        p.error(f"--k must be one of {passes.CHECK_K} (the check sizes timed)")
    args.out = args.out or (os.path.join(os.environ["OUT"], "gpu_check.json") if os.environ.get("OUT") else None)
    return args


def main(argv=None) -> int:
    """Every section under its guard, the record written after each; 1 when any failed."""
    args = parse(argv)
    cuda = cuda_calls.for_device(args.device)
    record = Record(args.out, {"device": cuda.name(), "dry_run": cuda.dry, "torch": torch.__version__,
                               "transformers": transformers_version(), "attention_path": attention_for(args.device.type), "dtype": args.dtype_name, "layers": args.layers,
                               "tiny": args.tiny, "alpha_cpu": passes.ALPHA_CPU, "passes": {}})
    print(f"device {record.data['device']}, {args.dtype_name}, torch {torch.__version__}, transformers "
          f"{record.data['transformers']}, attention {record.data['attention_path']}, layers {args.layers or 'as the real models'}; random weights, no download", flush=True)
    models: dict = {}  # name -> module, filled by the first section, emptied before parity
    timed = record.data["passes"]

    def keep(key: str, row: dict) -> None:  # each model and runner timed goes into the record at once
        timed[key] = row
        record.write()

    record.section("models", lambda: build_models(models, args, cuda))
    record.section("passes", lambda: passes.time_all(models, args, keep), needs=("models",))
    record.section("costs", lambda: passes.pair_costs(timed, args), needs=("passes",))
    record.section("first_call_capture", lambda: passes.first_call_capture(timed), needs=("passes",))
    record.section("syncs", lambda: runs.sync_counts(models, args, cuda), needs=("models",))  # before acceptance is forced
    record.section("loop_cost", lambda: runs.whole_runs(models, timed, args, "random weights"), needs=("passes",))
    if "compiled" in args.runners:
        record.section("draft_graph_of_k", lambda: runs.draft_graph_of_k(models, args, cuda), needs=("models",))
    record.section("forced_acceptance", lambda: forced(models, timed, args), needs=("passes",))
    models.clear()  # the models go before parity's pair is made
    record.section("attention", lambda: attention.compare(args, cuda))
    record.section("parity", lambda: parity.parity(args))
    record.data["peak_gb"] = cuda.peak_gb()
    record.write()
    if args.out:
        print(f"record: {args.out}")
    print_table(record.data, args)
    return 1 if record.data["errors"] else 0


def build_models(models: dict, args, cuda) -> dict:
    """Every model of the check into `models`, built once -> their sizes (billions of parameters)."""
    for name in made.shapes(args):
        models[name] = made.build(name, args)
    cuda.reset_peak()
    return {name: round(sum(p.numel() for p in m.parameters()) / 1e9, 3) for name, m in models.items()}


def forced(models: dict, timed: dict, args) -> dict:
    """The whole runs again with acceptance forced to 1: every draft kept, an upper bound."""
    made.force_acceptance(models)
    return runs.whole_runs(models, timed, args, "forced acceptance")


def transformers_version() -> str:
    import transformers

    return transformers.__version__
