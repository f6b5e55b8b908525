"""`python -m specdec check`: which ops of a target pass are not row-invariant on this machine.

A check of n tokens in one pass against the same tokens one at a time (specdec.measure.row_invariance),
on each runner and each n. The table gives one line per op (each over all its layers) with its
verdict: row-invariant (the same inputs gave the same bits in every row judged), NOT row-invariant
(the same inputs gave other bits: where, and by how much), or not judged (its inputs always differed
already, from an earlier op). Then, per runner and n, whether the logits were bitwise equal and the
first op whose output differed. `--before` undoes specdec/kernels/batch_invariant.py to show what it
fixes; `--invariant` makes any kernel's target batch-invariant to show what else differs.
"""

from __future__ import annotations

import json
from contextlib import nullcontext

from specdec.cli.args import add_model_args, kernel_names, load

INVARIANT, NOT_INVARIANT, NOT_JUDGED = "row-invariant", "NOT row-invariant", "not judged"


def add_check_command(sub) -> None:
    p = sub.add_parser("check", help="which ops of a target pass give a row other bits when other rows share the pass")
    add_model_args(p)
    p.add_argument("--target-kernel", default="w8a8", help="the target as run: bf16, int8, q4k, w8a8 (default: w8a8)")
    p.add_argument("--prefix", type=int, default=200, help="cached positions before the check")
    p.add_argument("--sizes", default="2,6,16", help="rows in the checked passes, comma-separated")
    p.add_argument("--runner", default="eager,static", help="comma-separated: eager, static")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--invariant", action="store_true",
                       help="make any kernel's target batch-invariant (row attention, fixed-order fp32 products), to see what else differs")
    group.add_argument("--before", action="store_true",
                       help="undo specdec/kernels/batch_invariant.py (packed sdpa, fp32 products on BLAS): the pass without it")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_check)


def run_check(args) -> int:
    from specdec.cli.passes import sizes_of

    sizes = sizes_of(args.sizes)
    runners = [r.strip() for r in args.runner.split(",") if r.strip()]
    if not runners or set(runners) - {"eager", "static"}:
        raise ValueError(f"runner must be eager or static (comma-separated), got {args.runner!r}")
    if args.prefix < 1:
        raise ValueError("prefix must be >= 1")
    if len(kernel_names(args)) != 1:  # a bad name, or a machine that cannot run w8a8, is told why before loading
        raise ValueError("check runs one target kernel; --target-kernel takes one name here")
    result = measure(args, sizes, runners)
    print(json.dumps(result, ensure_ascii=False) if args.json else table(result))
    return 0


def measure(args, sizes, runners) -> dict:
    import torch

    from specdec.kernels.batch_invariant import make_batch_invariant
    from specdec.kernels.target_kernels import kernel_target
    from specdec.measure.row_invariance import as_loaded, check_rows, code_ids
    from specdec.models.machine import machine_info

    pair = load(args)
    model = kernel_target(pair, args.target_kernel)
    if args.invariant:
        make_batch_invariant(model)
    ids = code_ids(pair.tokenizer, args.prefix + max(sizes))
    with torch.inference_mode(), as_loaded(model) if args.before else nullcontext():
        attention = model.config._attn_implementation
        checks = [check_rows(model, pair.vocab_size, ids, args.prefix, n, r) for r in runners for n in sizes]
    verdicts = {}
    for check in checks:
        for op, found in check.ops.items():
            v = verdicts.setdefault(op, {"op": op, "judged": 0, "differed": []})
            v["judged"] += found.judged
            v["differed"] += [{"runner": check.runner, "rows": check.rows, "layer": layer, "row": row, "max_diff": diff}
                              for layer, row, diff in found.differed]
    for v in verdicts.values():
        v["verdict"] = NOT_INVARIANT if v["differed"] else INVARIANT if v["judged"] else NOT_JUDGED
    return {"pair": pair.name, "machine": machine_info(pair), "target_kernel": args.target_kernel, "attention": attention,
            "prefix": args.prefix, "ops": list(verdicts.values()),
            "checks": [{"runner": c.runner, "rows": c.rows, "logits_max_diff": c.logits_diff, "first_difference": c.first} for c in checks]}


def table(result: dict) -> str:
    m = result["machine"]
    lines = [f"{result['pair']}, target kernel {result['target_kernel']}, {m['dtype']} on {m['device']}, attention "
             f"{result['attention']}, {result['prefix']} cached positions; CPU {m['cpu']} ({' '.join(m['cpu_flags']) or 'no avx2'})",
             "", "| op | verdict | where it differed (runner, check of n: layers) | max abs diff |", "|---|---|---|---:|"]
    for v in result["ops"]:
        where: dict[str, set] = {}
        for d in v["differed"]:
            where.setdefault(f"{d['runner']}, {d['rows']}", set()).add(d["layer"] or "-")
        places = "; ".join(f"{k}: {' '.join(sorted(layers, key=lambda s: (len(s), s)))}" for k, layers in where.items())
        biggest = f"{max(d['max_diff'] for d in v['differed']):.3g}" if v["differed"] else ""
        lines.append(f"| {v['op']} | {v['verdict']} | {places} | {biggest} |")
    lines += ["", "| runner | check of | logits | first op that differed |", "|---|---:|---|---|"]
    for c in result["checks"]:
        logits = "bitwise equal" if c["logits_max_diff"] == 0 else f"differ (max abs diff {c['logits_max_diff']:.3g})"
        lines.append(f"| {c['runner']} | {c['rows']} | {logits} | {c['first_difference'] or 'none'} |")
    bad = [v["op"] for v in result["ops"] if v["verdict"] == NOT_INVARIANT]
    lines += ["", f"not row-invariant here: {', '.join(bad)}" if bad else "every op judged is row-invariant here"]
    return "\n".join(lines)
