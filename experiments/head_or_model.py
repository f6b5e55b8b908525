"""`auto_head` against `auto_both` (the head or the draft model, whichever the cost K policy prices
faster each step), priced from one cost table so that the two compare without the machine's spread
from run to run: the held-out and bench prompts (64 tokens) or the page's example prompts (128
tokens, as the page runs them). Both are checked to give plain decoding's output.

Both runs read the `auto_both` table (the target's passes, the draft variant's and the head's step),
so their choices and their prices come from the same figures; each run is priced as `bench
--predictions` accounts a run's time (experiments.probe_clock_ab.priced_s).

    HF_HUB_OFFLINE=1 .venv/bin/python -m experiments.head_or_model [--examples] \
        [--target-kernel w4a8] [--draft-variant w4a8]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from experiments.probe_clock_ab import held_out_and_bench, priced_s
from specdec.bench.policies import mode_config
from specdec.engines.assemble import prepare
from specdec.engines.ours import OurSource
from specdec.models.pair import load_pair


def prompt_set(examples: bool) -> list[dict]:
    if examples:
        return [{**e, "chat": True} for e in json.loads(Path("assets/examples.json").read_text(encoding="utf-8"))]
    return held_out_and_bench()


def drafted_by(events) -> str:
    """accepted/drafted per drafter, e.g. 'head 31/84, lookup 1/9'."""
    counts: dict[str, list[int]] = {}
    for e in events:
        if e.drafted:
            c = counts.setdefault(e.drafter, [0, 0])
            c[0], c[1] = c[0] + e.accepted, c[1] + len(e.drafted)
    return ", ".join(f"{d} {a}/{n}" for d, (a, n) in sorted(counts.items()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", action="store_true", help="the page's example prompts, 128 tokens")
    p.add_argument("--target-kernel", default="w4a8")
    p.add_argument("--draft-variant", default="w4a8")
    args = p.parse_args()
    pair = load_pair("qwen2.5-coder-1.5b/0.5b")
    tokens = 128 if args.examples else 64
    configs = {mode: replace(mode_config(mode, 5, tokens, "constant", args.draft_variant), target_kernel=args.target_kernel)
               for mode in ("best_head", "best_both")}
    costs = prepare(pair, configs["best_both"]).costs  # one table steers and prices both
    step = costs.target_pass_s(1)
    print(f"target {args.target_kernel} ({1000 * step:.1f} ms a step), head c {costs.head_s / step:.3f}, "
          f"draft {args.draft_variant} c {costs.draft_s / step:.3f} ({costs.draft_pass_s(1) / step:.3f} first)")
    print("| prompt | auto_head x plain | drafted by | auto_both x plain | drafted by |\n|---|---:|---|---:|---|")
    speedups: dict[str, list[float]] = {mode: [] for mode in configs}
    for entry in prompt_set(args.examples):
        cells = []
        plain = None
        for mode, config in configs.items():
            source = OurSource(pair, config)
            ids = source.encode(entry["prompt"], chat=entry.get("chat"))
            plain = plain or [t for e in source.plain().decode(ids) for t in e.emitted]
            events = list(source.decode(ids, costs=costs))
            assert [t for e in events for t in e.emitted] == plain, f"{entry['id']} {mode}: speculative output left plain output"
            speedup = len(plain) * step / priced_s(events, costs)
            speedups[mode].append(speedup)
            cells += [f"{speedup:.2f}", drafted_by(events)]
        print(f"| {entry['id']} | " + " | ".join(cells) + " |", flush=True)
    for mode, values in speedups.items():
        print(f"{mode}: geomean {statistics.geometric_mean(values):.3f}, worst {min(values):.2f}")


if __name__ == "__main__":
    main()
