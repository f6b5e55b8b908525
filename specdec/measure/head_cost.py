"""What one draft step of the head costs on this machine: the cost K policy's draft cost for drafter "head".

The cost table (cost_table.py) times the draft model's one-token pass. The head drafts with a
different pass: one `step` of its layer over its own cache plus its lm_head rows. It is timed
here as a run makes it, after CONTEXT cached positions (the cost table's context), median over
rounds, and kept per pair, head kernel and thread count for the process. Measured, not assumed:
the cost policy's K for the head rests on it.
"""

from __future__ import annotations

import statistics
import time

import torch

from specdec.measure.cost_table import CONTEXT

REPEATS = 9


def head_step_s(pair, source, kernel: str, repeats: int = REPEATS) -> float:
    """Median seconds of one head draft step (a `step` and its logits, argmax read) after CONTEXT positions."""
    key = f"head:step_s:{kernel}:{torch.get_num_threads()}"
    if key not in pair.variants:
        pair.variants[key] = _time_step(source, pair.dtype, pair.device, repeats)
    return pair.variants[key]


def _time_step(source, dtype: torch.dtype, device: torch.device, repeats: int) -> float:
    run = source.make()
    hidden = run.head.shape.hidden
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(CONTEXT, hidden, generator=gen).to(device, dtype)  # (CONTEXT, H): any values cost the same
    ids = (torch.arange(CONTEXT, device=device) * 7919 + 13) % source.vocab_size  # (CONTEXT,)
    feature = run.extend(feats[:-1], ids[1:])  # (1, H)
    times = []
    for round_ in range(repeats + 2):
        start = time.perf_counter()
        out = run.step(feature, ids[-1:])
        run.logits(out).argmax(-1).tolist()  # read: a GPU's work is done when this returns
        if round_ >= 2:  # the first rounds pay for allocations
            times.append(time.perf_counter() - start)
        run.crop(CONTEXT - 1)
    return statistics.median(times)
