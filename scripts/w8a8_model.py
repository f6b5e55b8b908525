"""The embedded pair's whole models on the w8a8 kernel against bf16: pass costs, and where a pass goes.

    flock /tmp/specdec-bench.lock .venv/bin/python scripts/w8a8_model.py [--repeats 7] [--profile]

- target: one pass over n = 1, 2, 4, 6, 8, 16 tokens after ~200 cached positions (a code prompt),
  per target kernel, the cache cropped back after each pass; kernels and sizes interleaved round
  by round, so a change in the machine's load falls on all of them alike; medians;
- draft: one one-token pass (last logits only, as the drafter asks) per draft variant, interleaved
  the same way;
- `--profile`: torch.profiler over a few one-token passes of the w8a8 target (and 6-token
  checks) and of the w8a8 draft: each op's share of the CPU time, the W8A8 products apart from the
  rest (norms, rotary, attention, cache, Python).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.core.cached_model import CachedModel  # noqa: E402
from specdec.kernels.cpu_linear import linear_for  # noqa: E402
from specdec.kernels.target_kernels import kernel_target  # noqa: E402
from specdec.kernels.variants import draft_model  # noqa: E402
from specdec.models import machine  # noqa: E402
from specdec.models.pair import load_pair  # noqa: E402

CONTEXT = 200
SIZES = (1, 2, 4, 6, 8, 16)


def context_ids(pair) -> list[int]:
    """About 200 tokens of real code (this project's acceptance rules), then 16 more to feed."""
    text = (Path(__file__).resolve().parents[1] / "specdec" / "core" / "acceptance.py").read_text()
    ids = pair.tokenizer(text)["input_ids"]
    return ids[: CONTEXT + max(SIZES)]


def ready(model, pair, ids: list[int], last_only: bool) -> CachedModel:
    lm = CachedModel(model, pair.vocab_size, linear=linear_for(model))
    lm.prefill(torch.tensor(ids[:CONTEXT]))
    for _ in range(2):  # first passes pay for allocations
        lm.forward(torch.tensor(ids[CONTEXT : CONTEXT + 1]), last_only=last_only)
        lm.crop(CONTEXT)
    return lm


def timed(lm: CachedModel, feed: torch.Tensor, last_only: bool) -> float:
    start = time.perf_counter()
    lm.forward(feed, last_only=last_only)
    seconds = time.perf_counter() - start
    lm.crop(CONTEXT)
    return seconds * 1e3


def interleaved(models: dict, ids: list[int], sizes, repeats: int, last_only: bool) -> dict:
    """(name, n) -> median ms of a pass over n tokens after CONTEXT cached positions."""
    feed = torch.tensor(ids[CONTEXT : CONTEXT + max(sizes)])
    runs = {(name, n): [] for name in models for n in sizes}
    for _ in range(repeats):
        for name, lm in models.items():
            for n in sizes:
                runs[name, n].append(timed(lm, feed[:n], last_only))
    return {key: statistics.median(v) for key, v in runs.items()}


def table(title: str, result: dict, names, sizes) -> None:
    print(f"\n{title}\n| model | " + " | ".join(f"{n} tok" for n in sizes) + " |\n|---|" + "---:|" * len(sizes))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{result[name, n]:.1f}" for n in sizes) + " |")


def profile(name: str, lm: CachedModel, feed: torch.Tensor, last_only: bool, passes: int = 5) -> None:
    """Self CPU time per op over `passes` passes, the W8A8 products counted apart."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    timed(lm, feed, last_only)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = sum(timed(lm, feed, last_only) for _ in range(passes)) / passes
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / passes / 1e3  # ms per pass, every op's own time
    kernel = sum(e.self_cpu_time_total for e in events if e.key == "specdec::w8a8_linear") / passes / 1e3
    print(f"\n{name}: {wall:.1f} ms per pass (under the profiler); ops' own time {total:.1f} ms, "
          f"of which W8A8 products {kernel:.1f} ms ({kernel / total:.0%}), everything else {total - kernel:.1f} ms")
    print("| op | calls per pass | ms per pass | share |\n|---|---:|---:|---:|")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:14]:
        ms = e.self_cpu_time_total / passes / 1e3
        print(f"| {e.key} | {e.count // passes} | {ms:.2f} | {ms / total:.0%} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--kernels", default="bf16,w8a8")
    p.add_argument("--variants", default="bf16,int4,w8a8,w8a8-v32k")
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    pair = load_pair(None)
    print(f"{pair.name} on {machine.cpu_model()} ({' '.join(machine.reported_flags())}), {pair.dtype_name}, "
          f"{torch.get_num_threads()} threads, {CONTEXT} cached positions")
    ids = context_ids(pair)
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    targets = {k: ready(kernel_target(pair, k), pair, ids, False) for k in kernels}
    drafts = {v: ready(draft_model(pair, v), pair, ids, True) for v in variants}
    if args.profile:
        feed = torch.tensor(ids[CONTEXT : CONTEXT + 6])
        for name in kernels:
            profile(f"target {name}, 1 token", targets[name], feed[:1], False)
            profile(f"target {name}, 6 tokens", targets[name], feed, False)
        for name in variants:
            profile(f"draft {name}, 1 token", drafts[name], feed[:1], True)
        return
    table("target pass, ms (median)", interleaved(targets, ids, SIZES, args.repeats, False), kernels, SIZES)
    table("draft one-token pass, ms (median)", interleaved(drafts, ids, (1,), args.repeats, True), variants, (1,))


if __name__ == "__main__":
    main()
