"""The cost K policy's probes under three rules, `best` and `best_head` on the held-out and the bench
prompts: one run of plain steps for every drafter, ended by any drafting step (the rule before);
each drafter's own run (the rule now); and its own run with whether a probe may pay asked with the
draft model caught up instead of at the step's catch-up (tried, not kept). All give plain
decoding's output (checked).

The policy decides from counts and the cost table only, never from the clock, so each rule's steps
are the same whenever it runs. Each run is priced from this machine's cost table (`priced_s`: a
plain step at the decode step, a drafting step at its draft passes, catch-up included, its check and
the step's overhead; what `bench --predictions` accounts a run's time with, within 10% of the
measurement) beside its plain decoding's time, so the rules compare without this machine's spread
from run to run (a speedup measured twice with the same steps differed by up to 30% in one hour).

    HF_HUB_OFFLINE=1 .venv/bin/python -m experiments.probe_clock_ab [--modes best,best_head] \
        [--target-kernel w4a8] [--draft-variant w4a8]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from specdec.bench.policies import mode_config
from specdec.bench.predictions import catch_ups, priced_draft_s
from specdec.core import k_policy
from specdec.engines.assemble import prepare
from specdec.engines.ours import OurSource
from specdec.models.pair import load_pair
from specdec.serving.defaults_here import start_defaults

NOW = k_policy.CostK


def rule(shared_clock: bool = False, caught_up: bool = False) -> type:
    """The policy with one run of plain steps for every drafter, or with a probe's question asked
    with the draft model caught up."""

    class Rule(NOW):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if shared_clock:  # one count for every drafter: every key reads and writes the same value
                self.plain_run, self.wait = Shared(0), Shared(self.PROBE_AFTER)

        def may_probe(self, drafter: str, unseen: int) -> bool:
            if not caught_up or drafter != "model":
                return super().may_probe(drafter, unseen)
            return k_policy.could_pay(self.ceilings[drafter], self.draft_s(drafter), self.costs, self.k_max,
                                      self.costs.draft_pass_s(1))

    return Rule


class Shared(dict):
    """A run of plain steps shared by every drafter: one value whatever the key."""

    def __init__(self, value: int):
        super().__init__(value=value)

    def __getitem__(self, key):
        return super().__getitem__("value")

    def __setitem__(self, key, value):
        super().__setitem__("value", value)


def priced_s(events, costs) -> float:
    """The run's time from the cost table: each step's target pass, its drafts as the policy prices
    them (bench --predictions' priced_draft_s) and its overhead; a step whose drafts the head withdrew
    as unsure paid for the head's first draft."""
    fed, seconds = catch_ups(events), 0.0
    for e in events:
        n = len(e.drafted)
        if n:
            seconds += priced_draft_s(e, fed, costs) + k_policy.step_overhead_s(costs)
        elif e.withdrawn_why:
            seconds += costs.head_s if costs.head_first_s is None else costs.head_first_s
        seconds += costs.target_pass_s(n + 1)
    return seconds


def held_out_and_bench() -> list[dict]:
    """The held-out prompts, then the bench's; an id both sets have gets " (bench)" on the second."""
    prompts: list[dict] = []
    for f in ("assets/heldout_prompts.json", "assets/bench_prompts.json"):
        for e in json.loads(Path(f).read_text(encoding="utf-8")):  # both sets have a `translate-french`, with different text
            prompts.append({**e, "id": e["id"] + (" (bench)" if any(q["id"] == e["id"] for q in prompts) else "")})
    return prompts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default="best,best_head")
    p.add_argument("--target-kernel", default="w4a8")
    p.add_argument("--draft-variant", default="", help="default: this machine's, as on the page")
    args = p.parse_args()
    pair = load_pair("qwen2.5-coder-1.5b/0.5b")
    variant = args.draft_variant or start_defaults(pair.name, pair.device).draft_variant
    prompts = held_out_and_bench()
    rules = {"one clock (before)": rule(shared_clock=True), "own clocks (now)": NOW, "own clocks, caught up": rule(caught_up=True)}
    modes = args.modes.split(",")
    speedups: dict[tuple, float] = {}
    counts: dict[tuple, str] = {}
    for mode in modes:
        config = replace(mode_config(mode, 5, 64, "constant", variant), target_kernel=args.target_kernel)
        costs = prepare(pair, config).costs
        for entry in prompts:
            source = OurSource(pair, config)
            ids = source.encode(entry["prompt"], chat=entry.get("chat"))
            plain = list(source.plain().decode(ids))
            for name, policy in rules.items():
                k_policy.CostK = policy  # make_policy looks the class up on each run
                try:
                    events = list(source.decode(ids))
                finally:
                    k_policy.CostK = NOW
                assert [t for e in events for t in e.emitted] == [t for e in plain for t in e.emitted], \
                    f"{entry['id']} {mode} {name}: speculative output left plain output"
                tokens = sum(len(e.emitted) for e in events)
                speedups[entry["id"], mode, name] = tokens * costs.target_pass_s(1) / priced_s(events, costs)
                drafting = [e for e in events if e.drafter in ("model", "head")]
                probes = sum(1 for e in events if e.k == 1 and e.drafter in ("model", "head") and e.predicted_tok_s
                             and e.predicted_tok_s < 1 / costs.target_pass_s(1))
                counts[entry["id"], mode, name] = f"{sum(e.accepted for e in drafting)}/{sum(e.n_drafted for e in drafting)}, {probes}"
            print(f"{entry['id']} {mode}: " + ", ".join(f"{n} {speedups[entry['id'], mode, n]:.3f}" for n in rules), flush=True)
    print(f"\ntarget {args.target_kernel}, draft {variant}; priced x plain (accepted/drafted by the model or head, probes)")
    print("| prompt | mode | " + " | ".join(rules) + " |")
    print("|---|---|" + "---:|" * len(rules))
    for mode in modes:
        for entry in prompts:
            cells = [f"{speedups[entry['id'], mode, n]:.2f} ({counts[entry['id'], mode, n]})" for n in rules]
            print(f"| {entry['id']} | {mode} | " + " | ".join(cells) + " |")
    for mode in modes:
        for name in rules:
            values = [speedups[e["id"], mode, name] for e in prompts]
            print(f"{mode}, {name}: geomean {statistics.geometric_mean(values):.3f}, worst {min(values):.2f}")


if __name__ == "__main__":
    main()
