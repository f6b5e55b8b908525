"""What the side-by-side pass experiments (lean_pass_ab, joined_products_ab, attention_path_ab) time:
the embedded pair's target kernels over the sizes asked for, and a draft variant over one token; and
how they sum up two ways of running the same passes."""

from __future__ import annotations

import argparse
import statistics

from specdec.kernels.target_kernels import kernel_target
from specdec.kernels.variants import draft_model


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target-kernel", default="w4a8,w8a8", help="comma-separated target kernels")
    p.add_argument("--draft-variant", default="w4a8-v16k", help="a draft variant, or '' for none")
    p.add_argument("--sizes", default="1,4", help="tokens a target pass feeds, comma-separated (drafts: 1)")
    p.add_argument("--repeats", type=int, default=9)


def sizes(args) -> tuple[int, ...]:
    return tuple(int(n) for n in args.sizes.split(","))


def models(pair, args) -> dict[str, tuple]:
    """name -> (model, the sizes its passes feed, whether it asks for the last row's logits only)."""
    made = {name: (kernel_target(pair, name), sizes(args), False) for name in args.target_kernel.split(",")}
    if args.draft_variant:
        made[args.draft_variant] = (draft_model(pair, args.draft_variant), (1,), True)
    return made


def compared(before: list[float], after: list[float]) -> tuple[float, float, float]:
    """Seconds of the same passes run two ways, round by round -> (median before, median after, the
    median of the rounds' ratios after / before): a slow spell falls on both sides of a round alike."""
    return statistics.median(before), statistics.median(after), statistics.median(b / a for a, b in zip(before, after))
