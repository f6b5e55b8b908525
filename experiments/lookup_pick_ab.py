"""Who drafts where prompt lookup matches, with the cost K policy: the faster prediction of the two
drafters (specdec.core.proposers.pick, as it is) against lookup wherever it matches (the rule
before it), `best_head` and `best` beside plain decoding on the held-out and the bench prompts, the
two rules alternating prompt by prompt in one process. Both give plain decoding's output (checked).

    HF_HUB_OFFLINE=1 .venv/bin/python -m experiments.lookup_pick_ab [--repeats 1] \
        [--modes best_head,best] [--target-kernel w4a8] [--draft-variant int4-v32k]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace

import specdec.core.decoding as decoding
from specdec.bench.policies import mode_config
from specdec.engines.ours import OurSource
from specdec.models.pair import load_pair

FASTER = decoding.pick


def lookup_first(proposers, seq, choose):
    """The rule before: the first proposer with a draft (lookup where it matches), else the last."""
    if not proposers:
        return None, choose("", 1)
    proposer = next((p for p in proposers[:-1] if p.has_draft(seq)), proposers[-1])
    return proposer, choose(proposer.name, proposer.unseen(seq))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--modes", default="best_head,best")
    p.add_argument("--target-kernel", default="w4a8")
    p.add_argument("--draft-variant", default="int4-v32k")
    args = p.parse_args()
    pair = load_pair("qwen2.5-coder-1.5b/0.5b")
    prompts = [e for f in ("assets/heldout_prompts.json", "assets/bench_prompts.json") for e in json.load(open(f))]
    rules = {"lookup first": lookup_first, "faster": FASTER}
    modes = args.modes.split(",")
    speedups: dict[tuple, list[float]] = {}
    lookups: dict[tuple, list[str]] = {}
    for round_ in range(args.repeats):
        for entry in prompts:
            for mode in modes:
                for name, rule in rules.items():
                    decoding.pick = rule  # Decoding.steps looks it up on each step
                    try:
                        config = replace(mode_config(mode, 5, 64, "constant", args.draft_variant), target_kernel=args.target_kernel)
                        run = OurSource(pair, config).side_by_side(entry["prompt"], chat=entry.get("chat"), plain=True)
                    finally:
                        decoding.pick = FASTER
                    assert run.difference is None, f"{entry['id']} {mode}: speculative output left plain output"
                    key = (entry["id"], mode, name)
                    speedups.setdefault(key, []).append(run.speedup)
                    looked = [e for e in run.spec_events if e.drafter == "lookup"]
                    lookups[key] = [f"{sum(e.accepted for e in looked)}/{sum(len(e.drafted) for e in looked)}"]
        print(f"round {round_ + 1} of {args.repeats} done", flush=True)
    print("| prompt | mode | " + " | ".join(f"x plain, {name} | lookup accepted/drafted" for name in rules) + " |")
    print("|---|---|" + "---:|---:|" * len(rules))
    ratios = {name: [] for name in rules}
    for entry in prompts:
        for mode in modes:
            cells = []
            for name in rules:
                median = statistics.median(speedups[entry["id"], mode, name])
                ratios[name].append(median)
                cells.append(f"{median:.2f} | {lookups[entry['id'], mode, name][0]}")
            print(f"| {entry['id']} | {mode} | " + " | ".join(cells) + " |")
    for name, values in ratios.items():
        print(f"{name}: geomean {statistics.geometric_mean(values):.3f}, worst {min(values):.2f}")


if __name__ == "__main__":
    main()
