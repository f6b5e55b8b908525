"""Measured speedup against the three predictions, per prompt of the bench set, through the same
functions the app uses (specdec.bench.side_by_side.compare_runs -> specdec.measure.metrics -> specdec.core.theory).

    HF_HUB_OFFLINE=1 python scripts/check_predictions.py [--pair NAME] [--k 5] [--max-new-tokens 64]

Prints a markdown table: per prompt alpha, the accepted share, tokens per pass (measured and
expected from alpha), c, the verify cost, the measured speedup (prompt processing excluded) and
each prediction with measured / predicted; then whether the accounting ("from passes") is
within --tolerance of the measurement on every prompt. Exit status 1 if not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specdec.core.config import GenerationConfig  # noqa: E402
from specdec.models import machine  # noqa: E402
from specdec.models.presets import DEFAULT_PAIR  # noqa: E402
from specdec.models.pair import load_pair  # noqa: E402
from specdec.bench.side_by_side import compare_runs  # noqa: E402
from specdec.core.theory import expected_pass_counts, prediction_gap  # noqa: E402
from specdec.kernels.variants import default_variant  # noqa: E402


def cpu_flags() -> str:
    flags = machine.cpu_flags()
    kind = "avx512_bf16" if "avx512_bf16" in flags else ("avx2, no avx512_bf16" if "avx2" in flags else "no avx2")
    return f"{machine.cpu_model()} ({kind})"


def shape(events, alpha: float) -> str:
    """Bursts show in the shape more than in the mean: how many passes emitted one token (rejected
    at once) and how many all K+1 (every draft kept), against what independent acceptance predicts."""
    drafting = [e for e in events if e.drafted]
    counts = expected_pass_counts(alpha, [len(e.drafted) for e in drafting])
    ones = sum(1 for e in drafting if len(e.emitted) == 1)
    full = sum(1 for e in drafting if e.accepted == len(e.drafted))
    expected_full = sum(alpha ** len(e.drafted) for e in drafting)
    return f"{ones} / {full} ({counts[0]:.1f} / {expected_full:.1f})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default=os.environ.get("SPECDEC_PAIR", DEFAULT_PAIR))
    p.add_argument("--prompts", default=str(ROOT / "assets" / "bench_prompts.json"))
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--drafter", default="model", choices=["model", "lookup", "auto"])
    p.add_argument("--draft-variant", default=None, help="default: the app's default for the pair on this machine")
    p.add_argument("--dtype", default=None, help="default: $SPECDEC_DTYPE, else the automatic choice")
    p.add_argument("--tolerance", type=float, default=0.10, help="allowed |measured / from_passes - 1|")
    args = p.parse_args(argv)

    prompts = json.loads(Path(args.prompts).read_text())
    pair = load_pair(args.pair, dtype=args.dtype)
    variant = args.draft_variant or default_variant(pair.name, pair.device)  # what the app starts with
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k, drafter=args.drafter,
                              draft_variant=variant).validate()
    # A short warm-up of both runs: the first passes of a process pay for allocations.
    compare_runs(pair, prompts[0]["prompt"], replace(config, max_new_tokens=8), chat=prompts[0].get("chat"), with_plain=True)

    print(f"pair {pair.name}, {pair.device} {pair.dtype_name}, drafter {args.drafter} (draft variant {variant}), K = {args.k}, "
          f"{args.max_new_tokens} new tokens, greedy; CPU {cpu_flags()}, {machine.cores()} cores\n")
    print("| prompt | \u03b1 | accepted share | tokens / pass (expected from \u03b1) | passes with 1 / K+1 tokens (expected) | "
          "c | verify cost | measured | textbook (m/p) | with verify cost (m/p) | from passes (m/p) | same as plain |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    worst = 0.0
    for entry in prompts:
        r = compare_runs(pair, entry["prompt"], config, chat=entry.get("chat"), with_plain=True)
        m, measured = r.spec, r.speedup
        gap = prediction_gap(measured, m)
        worst = max(worst, abs(gap.ratio("from_passes") - 1))
        print(f"| {entry.get('id', '?')} | {m.alpha:.2f} | {m.accepted_share:.0%} | {m.tokens_per_step:.2f} "
              f"({m.expected_tokens_per_pass:.2f}) | {shape(r.spec_events, m.alpha)} | {m.cost_ratio_c:.3f} | {m.verify_cost:.2f} | {measured:.2f} | "
              f"{gap.textbook:.2f} ({gap.ratio('textbook'):.2f}) | {gap.with_verify_cost:.2f} ({gap.ratio('with_verify_cost'):.2f}) | "
              f"{gap.from_passes:.2f} ({gap.ratio('from_passes'):.2f}) | {'yes' if r.difference is None else 'no'} |",
              flush=True)
    ok = worst <= args.tolerance
    print(f"\naccounting within {args.tolerance:.0%} of the measured speedup on every prompt: "
          f"{'yes' if ok else 'NO'} (largest gap {worst:.1%})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
