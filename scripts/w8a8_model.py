"""The embedded pair's whole models on the w8a8 kernel against bf16: pass costs, and where a pass goes.

    flock /tmp/specdec-bench.lock .venv/bin/python scripts/w8a8_model.py [--repeats 7] [--profile]

- target: one pass over n = 1, 2, 4, 6, 8, 16 tokens after ~200 cached positions (a code prompt),
  per target kernel, the cache cropped back after each pass; kernels and sizes interleaved round
  by round, so a change in the machine's load falls on all of them alike; medians;
- draft: one one-token pass (last logits only, as the drafter asks) per draft variant, interleaved
  the same way;
- `--split`: each w8a8 model's pass, and the same pass with its W8A8 products replaced by zeros,
  interleaved: the difference is what the products cost in a real pass, the rest is everything else;
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
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
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


def in_dtype(base, base_dir, name: str, dtype: str):
    """A w8a8 model from its stored form (built by the runs above) with its other parts in `dtype`."""
    from specdec.kernels.variants import parse_variant, quantized_model

    spec = parse_variant(name)
    if spec.vocab:
        raise ValueError("--other-glue takes the w8a8 variants with the whole head only")
    return quantized_model(base, base_dir, spec, None, DTYPES[dtype], torch.device("cpu"))


def split(targets: dict, drafts: dict, ids: list[int], repeats: int) -> None:
    """Each w8a8 model's pass with its W8A8 products and with them replaced by zeros of their output
    shape (what is left: attention, norms, rotary, the cache, Python), interleaved: the difference is
    the products' share of a real pass."""
    from specdec.kernels.w8a8 import W8A8Linear

    real = W8A8Linear.forward

    def no_product(self, x):
        return x.new_zeros(*x.shape[:-1], self.out_features)

    chosen = {f"target {k}": lm for k, lm in targets.items() if k.startswith("w8a8")}
    chosen |= {f"draft {v}": lm for v, lm in drafts.items() if v.startswith("w8a8")}
    runs: dict = {}
    for _ in range(repeats):
        for forward, what in ((real, "whole pass"), (no_product, "without the products")):
            W8A8Linear.forward = forward
            for name, lm in chosen.items():
                for n in ((1, 6) if name.startswith("target") else (1,)):
                    feed = torch.tensor(ids[CONTEXT : CONTEXT + n])
                    runs.setdefault((name, n, what), []).append(timed(lm, feed, name.startswith("draft")))
    W8A8Linear.forward = real
    print("\n| model | tokens | whole pass ms | without the W8A8 products ms | products ms |\n|---|---:|---:|---:|---:|")
    for name, n in dict.fromkeys((k[0], k[1]) for k in runs):
        whole, rest = (statistics.median(runs[name, n, w]) for w in ("whole pass", "without the products"))
        print(f"| {name} | {n} | {whole:.1f} | {rest:.1f} | {whole - rest:.1f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--kernels", default="bf16,w8a8")
    p.add_argument("--variants", default="bf16,int4,w8a8,w8a8-v32k")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--split", action="store_true", help="time the w8a8 models with and without their W8A8 products")
    p.add_argument("--other-glue", default="", help="also run the w8a8 models with the rest of the model in these dtypes (bf16, fp32)")
    args = p.parse_args()
    pair = load_pair(None)
    print(f"{pair.name} on {machine.cpu_model()} ({' '.join(machine.reported_flags())}), {pair.dtype_name}, "
          f"{torch.get_num_threads()} threads, {CONTEXT} cached positions")
    ids = context_ids(pair)
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    targets = {k: ready(kernel_target(pair, k), pair, ids, False) for k in kernels}
    drafts = {v: ready(draft_model(pair, v), pair, ids, True) for v in variants}
    for dtype in [d.strip() for d in args.other_glue.split(",") if d.strip()]:  # only where the model's own differs
        for name in [k for k in kernels if k == "w8a8" and DTYPES[dtype] != targets[k].model.dtype]:
            targets[f"{name} ({dtype} glue)"] = ready(in_dtype(pair.target, pair.target_dir, name, dtype), pair, ids, False)
        for name in [v for v in variants if v == "w8a8" and DTYPES[dtype] != drafts[v].model.dtype]:
            drafts[f"{name} ({dtype} glue)"] = ready(in_dtype(pair.draft, pair.draft_dir, name, dtype), pair, ids, True)
    kernels, variants = list(targets), list(drafts)
    print("models' own dtype:", ", ".join(f"{k} {lm.model.dtype}" for k, lm in [*targets.items(), *drafts.items()]).replace("torch.", ""))
    if args.split:
        split(targets, drafts, ids, args.repeats)
        return
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
