"""The cost K policy's probes, as they are (each drafter counts its own plain steps, and whether a probe
may pay is asked with the draft model caught up) against the rule before (one count for every
drafter, reset by any drafting step, and the question priced at the step's catch-up), `best` and
`best_head` beside plain decoding on the held-out and the bench prompts, the two rules alternating
prompt by prompt in one process. Both give plain decoding's output (checked).

    HF_HUB_OFFLINE=1 .venv/bin/python -m experiments.probe_clock_ab [--repeats 1] \
        [--modes best,best_head] [--target-kernel w4a8] [--draft-variant w4a8]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace

import specdec.core.k_policy as k_policy
from specdec.bench.policies import mode_config
from specdec.engines.ours import OurSource
from specdec.models.pair import load_pair
from specdec.serving.defaults_here import start_defaults

NOW = k_policy.CostK


class Before(NOW):
    """The rule before: one run of plain steps for all drafters, ended by any drafting step, and a
    probe's question priced at this step's catch-up."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.run_all, self.wait_all = 0, self.PROBE_AFTER

    def choose(self, drafter: str = "model", unseen: int = 1) -> k_policy.Choice:
        alpha, draft_s = self.estimates[drafter].alpha, self.draft_s(drafter)
        if drafter == "head":
            first_s = getattr(self.costs, "head_first_s", None)
        else:
            first_s = self.costs.draft_pass_s(unseen) if drafter == "model" else None
        best = k_policy.best_choice(alpha, draft_s, self.costs, self.k_max, first_s, unseen)
        if best.k > 0 or not k_policy.could_pay(self.ceilings[drafter], draft_s, self.costs, self.k_max, first_s):
            return best
        if self.run_all >= self.wait_all:
            return k_policy.Choice(1, k_policy.predicted_rate(1, alpha, draft_s, self.costs, first_s), probe=True)
        return best

    def update(self, choice, drafted: int, accepted: int, drafter: str = "model") -> None:
        self.estimates[drafter].update(drafted, accepted)
        if choice.probe:
            self.run_all, self.wait_all = 0, min(2 * self.wait_all, self.PROBE_MAX)
        elif choice.k == 0:
            self.run_all += 1
        else:
            self.run_all, self.wait_all = 0, self.PROBE_AFTER


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--modes", default="best,best_head")
    p.add_argument("--target-kernel", default="w4a8")
    p.add_argument("--draft-variant", default="", help="default: this machine's, as on the page")
    args = p.parse_args()
    pair = load_pair("qwen2.5-coder-1.5b/0.5b")
    variant = args.draft_variant or start_defaults(pair.name, pair.device).draft_variant
    prompts = [e for f in ("assets/heldout_prompts.json", "assets/bench_prompts.json") for e in json.load(open(f))]
    rules = {"before": Before, "now": NOW}
    modes = args.modes.split(",")
    speedups: dict[tuple, list[float]] = {}
    probes: dict[tuple, str] = {}
    for round_ in range(args.repeats):
        for entry in prompts:
            for mode in modes:
                for name, rule in rules.items():
                    k_policy.CostK = rule  # make_policy looks the class up on each run
                    try:
                        config = replace(mode_config(mode, 5, 64, "constant", variant), target_kernel=args.target_kernel)
                        run = OurSource(pair, config).side_by_side(entry["prompt"], chat=entry.get("chat"), plain=True)
                    finally:
                        k_policy.CostK = NOW
                    assert run.difference is None, f"{entry['id']} {mode}: speculative output left plain output"
                    key = (entry["id"], mode, name)
                    speedups.setdefault(key, []).append(run.speedup)
                    by_model = [e for e in run.spec_events if e.drafter in ("model", "head")]
                    probes[key] = f"{sum(e.accepted for e in by_model)}/{sum(e.n_drafted for e in by_model)}"
        print(f"round {round_ + 1} of {args.repeats} done", flush=True)
    print(f"target {args.target_kernel}, draft {variant}")
    print("| prompt | mode | " + " | ".join(f"x plain, {name} | model or head accepted/drafted" for name in rules) + " |")
    print("|---|---|" + "---:|---:|" * len(rules))
    ratios: dict[tuple, list[float]] = {}
    for entry in prompts:
        for mode in modes:
            cells = []
            for name in rules:
                median = statistics.median(speedups[entry["id"], mode, name])
                ratios.setdefault((mode, name), []).append(median)
                cells.append(f"{median:.2f} | {probes[entry['id'], mode, name]}")
            print(f"| {entry['id']} | {mode} | " + " | ".join(cells) + " |")
    for (mode, name), values in ratios.items():
        print(f"{mode}, {name}: geomean {statistics.geometric_mean(values):.3f}, worst {min(values):.2f}")


if __name__ == "__main__":
    main()
