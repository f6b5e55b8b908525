"""`python -m specdec defaults`: what a run of this pair starts on here, and the figures that chose it.

On a CPU: every offered target kernel, draft variant and the trained head timed through the cost
tables (cached per machine; measured once, within specdec.serving.defaults_here.BUDGET_S), each
configuration's predicted tokens/s from those costs and the drafters' recorded acceptance, and the
predicted fastest (specdec.measure.choose). Where nothing is measured (a GPU), the recorded entry for
this kind of machine (specdec.kernels.machine_defaults) and why.
"""

from __future__ import annotations

import json

from specdec.cli.args import add_model_args, load


def add_defaults_command(sub) -> None:
    p = sub.add_parser("defaults", help="the configuration a run starts on here: candidates, their measured costs, predicted speeds, the choice")
    add_model_args(p)
    p.add_argument("--refresh", action="store_true", help="measure again, even where this machine's tables and choice are kept")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds the measurement may take; what it leaves out is measured at the next call (default: 40)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_defaults)


def run_defaults(args) -> int:
    from specdec.serving import defaults_here

    pair = load(args)
    budget = args.budget if args.budget is not None else defaults_here.BUDGET_S
    why_not = defaults_here.measurable(pair.name, pair.device)
    if why_not:
        chosen = defaults_here.start_defaults(pair.name, pair.device)
        out = {"pair": pair.name, "measured": False, "why": why_not, "line": chosen.line, "candidates": [],
               "chosen": {"target_kernel": chosen.target_kernel, "draft_variant": chosen.draft_variant, "drafter": chosen.drafter,
                          "runner": chosen.runner, "k_policy": chosen.k_policy}}
        print(json.dumps(out, ensure_ascii=False) if args.json else f"{pair.name}: {why_not}\n{chosen.line}")
        return 0
    measured = (defaults_here.measure_here(pair, budget, progress=not args.json, refresh=True) if args.refresh
                else defaults_here.ensure(pair, progress=not args.json, budget_s=budget))
    print(json.dumps(as_json(measured), ensure_ascii=False) if args.json else table(measured))
    return 0


def as_json(measured) -> dict:
    d = measured.defaults()
    return {**measured.as_json(), "measured": True,
            "start": {"target_kernel": d.target_kernel, "draft_variant": d.draft_variant, "drafter": d.drafter,
                      "runner": d.runner, "k_policy": d.k_policy}}


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f}"


def table(measured) -> str:
    """The candidates, fastest first, as a markdown table; then what was not measured, and the choice."""
    rows = ["| target kernel | drafter | decode step ms | draft step ms | c | \u03b1 (recorded) | K | check ms | predicted tok/s | x plain |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    plain = {c.target_kernel: c.tok_s for c in measured.candidates if c.drafter == "none"}
    for c in sorted(measured.candidates, key=lambda x: -x.tok_s):
        drafter = {"none": "plain steps", "head": "head"}.get(c.drafter, f"model {c.draft_variant}")
        mark = " **chosen**" if c == measured.chosen else ""
        rows.append(f"| {c.target_kernel} | {drafter}{mark} | {_ms(c.decode_step_s)} | {_ms(c.draft_s)} | "
                    f"{'-' if c.c is None else f'{c.c:.2f}'} | {'-' if c.alpha is None else f'{c.alpha:.2f}'} | {c.k} | "
                    f"{_ms(c.check_s)} | {c.tok_s:.2f} | {c.tok_s / plain[c.target_kernel]:.2f} |")
    lines = [f"pair {measured.pair}, {measured.dtype}, machine {measured.machine}"
             + (f", measured in {measured.seconds:.0f} s" if measured.seconds else ", as kept from an earlier start"), "", *rows, ""]
    lines += [f"not measured: {what} ({why})" for what, why in measured.skipped.items()]
    d = measured.defaults()
    lines.append(f"starts on: target {d.target_kernel}, draft {d.draft_variant}, drafter {d.drafter}, {d.runner} runner, "
                 f"K policy {d.k_policy}")
    lines.append(measured.line)
    return "\n".join(lines)
