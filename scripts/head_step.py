"""One draft step of the trained head against one pass of the w8a8-v32k draft model, side by side.

    nice -n 5 .venv/bin/python scripts/head_step.py [--repeats 31] [--head PATH]

After about 200 cached positions of code (the same text for both), each round times, in turn:
- the draft model `w8a8-v32k` (specdec/kernels/variants.py): one one-token pass, last logits only,
  as its drafter asks (CachedModel, its cache cropped back after the pass);
- the head: `extend` of one pair (a feature and a token) plus `logits` (HeadRun, cropped back),
  its layers dense in the pair's dtype or on the w8a8 kernel, its lm_head on the 32768-token subset
  dense or w8a8.
Medians over the rounds, each figure also as a ratio to the draft model's pass in the same rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.core.runners.eager_model import CachedModel  # noqa: E402
from specdec.kernels.cpu_linear import linear_for  # noqa: E402
from specdec.kernels.head_offer import find_head, head_ids, head_run, head_weights, subset_lm_head  # noqa: E402
from specdec.kernels.head_store import read_head  # noqa: E402
from specdec.kernels.variants import draft_model  # noqa: E402
from specdec.models import machine  # noqa: E402
from specdec.models.pair import load_pair  # noqa: E402

CONTEXT = 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--head", help="head file (default: the one the pair is offered)")
    args = parser.parse_args()
    pair = load_pair("qwen2.5-coder-1.5b/0.5b")
    stored = read_head(Path(args.head)) if args.head else find_head(pair).stored
    if stored is None:
        raise SystemExit(f"no head: {find_head(pair).reason}")
    text = (Path(__file__).resolve().parents[1] / "specdec" / "core" / "acceptance.py").read_text()
    ids = torch.tensor(pair.tokenizer(text)["input_ids"][: CONTEXT + 1])
    with torch.inference_mode():
        feats = pair.target.model(input_ids=ids[None]).last_hidden_state[0]  # (CONTEXT + 1, H)
    draft = draft_model(pair, "w8a8-v32k")
    lm = CachedModel(draft, pair.vocab_size, linear=linear_for(draft))
    lm.prefill(ids[:CONTEXT])
    subset = head_ids(pair)
    lanes = {"draft model w8a8-v32k": lambda: draft_pass(lm, ids)}
    for layers in ("dense", "w8a8"):
        for rows in ("dense", "w8a8"):
            run = head_run(pair, head_weights(pair, stored, layers), subset_lm_head(pair, subset, rows))
            run.extend(feats[: CONTEXT - 1], ids[1:CONTEXT])
            lanes[f"head: layers {layers}, lm_head rows {rows}"] = lambda run=run: head_step(run, feats, ids)
    times = {name: [] for name in lanes}
    for round_ in range(args.repeats + 2):
        for name, lane in lanes.items():
            seconds = lane()
            if round_ >= 2:  # the first rounds pay for allocations
                times[name].append(seconds)
    base = statistics.median(times["draft model w8a8-v32k"])
    print(f"{machine.cpu_model()} ({' '.join(machine.reported_flags())}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, pair dtype {pair.dtype}, head file {stored.path.stat().st_size / 1e6:.1f} MB")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:40s} {median * 1e3:7.2f} ms  ({median / base:.2f} of the draft model's pass)")
    return 0


def draft_pass(lm: CachedModel, ids: torch.Tensor) -> float:
    start = time.perf_counter()
    lm.forward(ids[CONTEXT : CONTEXT + 1], last_only=True).argmax(-1).item()
    seconds = time.perf_counter() - start
    lm.crop(CONTEXT)
    return seconds


def head_step(run, feats: torch.Tensor, ids: torch.Tensor) -> float:
    start = time.perf_counter()
    out = run.extend(feats[CONTEXT - 1 : CONTEXT], ids[CONTEXT : CONTEXT + 1])
    run.logits(out).argmax(-1).item()
    seconds = time.perf_counter() - start
    run.crop(CONTEXT - 1)
    return seconds


if __name__ == "__main__":
    sys.exit(main())
