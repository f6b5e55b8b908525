"""The eager runner's lean pass against transformers' decoder, side by side in one process: the
embedded pair's target kernels and a draft variant, each pass timed both ways round by round
(specdec.measure.passcost.time_rounds), after the same cached context; medians and their ratio.

The runner chooses the lean pass by itself wherever it supports the model (specdec/core/runners/
lean_pass.py); this puts transformers' path beside it, as it ran before:

    HF_HUB_OFFLINE=1 .venv/bin/python -m experiments.lean_pass_ab [--target-kernel w4a8,w8a8] \
        [--draft-variant w4a8-v16k] [--sizes 1,4] [--repeats 9]
"""

from __future__ import annotations

import argparse

import torch

from experiments import pass_models
from specdec.core.runners.eager_model import CachedModel
from specdec.kernels.cpu_linear import linear_for
from specdec.measure.cost_table import CONTEXT
from specdec.measure.passcost import Lane, filler_ids, time_rounds
from specdec.models.machine import cpu_model
from specdec.models.pair import load_pair


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    pass_models.add_arguments(p)
    args = p.parse_args()
    pair = load_pair("qwen2.5-coder-1.5b/0.5b")
    sizes = pass_models.sizes(args)
    models = pass_models.models(pair, args)
    context = filler_ids(pair.vocab_size, CONTEXT)
    lanes = {}
    for name, (model, lane_sizes, last_only) in models.items():
        for lean in (True, False):
            lm = CachedModel(model, pair.vocab_size, linear_for(model), lean=lean, positions=CONTEXT + 64)
            lm.prefill(torch.tensor(context[:-max(lane_sizes)]))
            lanes[name, lean] = Lane(lm, lane_sizes, last_only)
    runs = time_rounds(lanes, context[-max(sizes):], args.repeats)
    print(f"{cpu_model()}, {torch.get_num_threads()} threads, {CONTEXT} cached positions, medians of {args.repeats} rounds")
    print(f"{'model':12s} {'tokens':>6s} {'transformers ms':>16s} {'lean ms':>8s} {'lean / transformers':>20s}")
    for name, (_, lane_sizes, _) in models.items():
        for n in lane_sizes:
            stock, lean, ratio = pass_models.compared(runs[(name, False), n], runs[(name, True), n])
            print(f"{name:12s} {n:6d} {1e3 * stock:16.1f} {1e3 * lean:8.1f} {ratio:20.3f}")


if __name__ == "__main__":
    main()
