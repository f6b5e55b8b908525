"""The lean pass with a layer's products joined (q/k/v in one call, gate/up in another:
specdec/core/runners/joined_products.py) against the same pass calling each product alone, side by
side in one process: the embedded pair's target kernels and a draft variant, each pass timed both
ways round by round (specdec.measure.passcost.time_rounds) after the same cached context; medians
and their ratio, and whether the two ways gave the same logits.

    HF_HUB_OFFLINE=1 .venv/bin/python -m experiments.joined_products_ab [--target-kernel w4a8,w8a8] \
        [--draft-variant w4a8-v16k] [--sizes 1,4] [--repeats 9]
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import replace

import torch

from experiments import pass_models
from specdec.core.runners import joined_products
from specdec.core.runners.eager_model import CachedModel
from specdec.kernels.cpu_linear import linear_for
from specdec.measure.cost_table import CONTEXT
from specdec.measure.passcost import Lane, filler_ids, time_rounds
from specdec.models.machine import cpu_model
from specdec.models.pair import load_pair


@contextlib.contextmanager
def apart(decoder):
    """The decoder's plan with nothing joined inside (each product called alone, on the same weights)."""
    joined = joined_products.plan(decoder)
    decoder.__dict__[joined_products.PLAN] = [replace(layer, qkv=None, gate_up=None) for layer in joined]
    try:
        yield
    finally:
        decoder.__dict__[joined_products.PLAN] = joined


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    pass_models.add_arguments(p)
    args = p.parse_args()
    pair = load_pair("qwen2.5-coder-1.5b/0.5b")
    sizes = pass_models.sizes(args)
    models = pass_models.models(pair, args)
    context = filler_ids(pair.vocab_size, CONTEXT)
    lanes, same = {}, {}
    for name, (model, lane_sizes, last_only) in models.items():
        decoder = model.get_decoder()
        for joined in (True, False):
            lm = CachedModel(model, pair.vocab_size, linear_for(model), positions=CONTEXT + 64)
            with contextlib.nullcontext() if joined else apart(decoder):
                lm.prefill(torch.tensor(context[: -max(lane_sizes)]))
            lanes[name, joined] = Lane(lm, lane_sizes, last_only, around=contextlib.nullcontext if joined else lambda d=decoder: apart(d))
        feed = torch.tensor(context[-max(lane_sizes):])
        outputs = []
        for joined in (True, False):
            lm = lanes[name, joined].model
            with lanes[name, joined].around():
                outputs.append(lm.forward(feed, last_only=False))
            lm.crop(CONTEXT - max(lane_sizes))
        same[name] = torch.equal(*outputs)
    runs = time_rounds(lanes, context[-max(sizes):], args.repeats)
    print(f"{cpu_model()}, {torch.get_num_threads()} threads, {CONTEXT} cached positions, medians of {args.repeats} rounds")
    print(f"{'model':12s} {'tokens':>6s} {'apart ms':>9s} {'joined ms':>10s} {'joined / apart':>15s} {'same logits':>12s}")
    for name, (_, lane_sizes, _) in models.items():
        for n in lane_sizes:
            alone, joined, ratio = pass_models.compared(runs[(name, False), n], runs[(name, True), n])
            print(f"{name:12s} {n:6d} {1e3 * alone:9.1f} {1e3 * joined:10.1f} {ratio:15.3f} {same[name]!s:>12s}")


if __name__ == "__main__":
    main()
