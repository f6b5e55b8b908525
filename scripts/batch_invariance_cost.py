"""What batch invariance costs, and the w8a8 pass costs by rows per instruction-set path.

    .venv/bin/python scripts/batch_invariance_cost.py \
        [--dtype fp32] [--sizes 1,2,4,6,8] [--paths avx512,avx2] [--attention packed,rows] [--runners eager,static]

The embedded target on the w8a8 kernel (or --kernel bf16: the dense target), one pass over n tokens after CONTEXT cached positions (a code
prompt), the cache cropped back after each pass, for every combination of
- `packed`: before (torch's sdpa with the query heads packed per key/value head, fp32 products on
  BLAS) or `rows`: after (the batch-invariant attention and fixed-order fp32 products,
  specdec/kernels/batch_invariant.py);
- the W8A8 kernel's instruction-set path (`avx512`, `avx2`: every W8A8 layer's `path` set in place);
- the runner: eager (DynamicCache) or static (a preallocated cache, a mask over its capacity);
and the w8a8-v32k draft's one-token pass (last row only) on each path. Everything is interleaved
round by round, so a change in the machine's load falls on all of them alike; medians in ms.
Run it again with ATEN_CPU_CAPABILITY=avx2 for torch's own ops as an AVX2-only CPU runs them.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.core.runners.eager_model import CachedModel  # noqa: E402
from specdec.core.runners.static_model import StaticModel  # noqa: E402
from specdec.kernels.cpu_linear import linear_for  # noqa: E402
from specdec.kernels.batch_invariant import MARK  # noqa: E402
from specdec.kernels.batch_invariant import NAME as ROWS  # noqa: E402
from specdec.kernels.target_kernels import kernel_target  # noqa: E402
from specdec.kernels.variants import draft_model  # noqa: E402
from specdec.kernels.w8a8 import PATHS, W8A8Linear  # noqa: E402
from specdec.models import machine  # noqa: E402
from specdec.core.runners.attention import PACKED  # noqa: E402
from specdec.core.runners.attention import register_paths  # noqa: E402
from specdec.models.pair import load_pair  # noqa: E402

CONTEXT = 200
ATTENTION = {"packed": PACKED, "rows": ROWS}


def context_ids(pair, extra: int) -> list[int]:
    text = (Path(__file__).resolve().parents[1] / "specdec" / "core" / "acceptance.py").read_text()
    return pair.tokenizer(text)["input_ids"][: CONTEXT + extra]


def set_path(model, path: str) -> None:
    for module in model.modules():
        if isinstance(module, W8A8Linear):
            module.path = PATHS[path]


def ready(model, pair, ids, runner: str):
    lm = (CachedModel if runner == "eager" else StaticModel)(model, pair.vocab_size, linear=linear_for(model))
    if runner == "static":
        lm.reserve(len(ids) + 40)
    lm.prefill(torch.tensor(ids[:CONTEXT]))
    return lm


def timed(lm, feed: torch.Tensor, last_only: bool) -> float:
    start = time.perf_counter()
    lm.forward(feed, last_only=last_only)
    seconds = time.perf_counter() - start
    lm.crop(CONTEXT)
    return seconds * 1e3


def switch(target, lms: dict, attention: str) -> None:
    """The target as before (packed sdpa, BLAS fp32 products) or after (row attention, fixed-order products)."""
    target.set_attn_implementation(ATTENTION[attention])
    setattr(target, MARK, attention == "rows")
    for lm in lms.values():
        lm.linear = linear_for(target)


def measure(args) -> dict:
    pair = load_pair(None, dtype=args.dtype)
    target = kernel_target(pair, args.kernel)
    draft = draft_model(pair, args.draft)
    register_paths()  # the packed function; the rounds switch between the two
    sizes = [int(s) for s in args.sizes.split(",")]
    ids = context_ids(pair, max(sizes))
    feeds = {n: torch.tensor(ids[CONTEXT : CONTEXT + n]) for n in sizes}
    lms = {r: ready(target, pair, ids, r) for r in args.runners.split(",")}
    drafter = ready(draft, pair, ids, "eager")
    cases = list(itertools.product(args.attention.split(","), args.paths.split(","), lms))
    runs: dict = {}
    for _ in range(args.repeats):
        for attention, path, runner in cases:
            switch(target, lms, attention)
            set_path(target, path)
            for n in sizes:
                runs.setdefault(("target", attention, path, runner, n), []).append(timed(lms[runner], feeds[n], False))
        for path in args.paths.split(","):
            set_path(draft, path)
            runs.setdefault(("draft", "", path, "eager", 1), []).append(timed(drafter, feeds[1], True))
    switch(target, lms, "rows")
    print(f"{pair.name}, {args.kernel} target and {args.draft} draft, {pair.dtype_name} glue, {CONTEXT} cached positions, "
          f"CPU {machine.cpu_model()} ({' '.join(machine.reported_flags())}), torch ops at "
          f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'default')}, {torch.get_num_threads()} threads, "
          f"medians of {args.repeats}")
    return {key: statistics.median(v) for key, v in runs.items()}, sizes


def report(result: dict, sizes) -> None:
    print("\n| pass | attention | W8A8 path | runner | " + " | ".join(f"{n} tok" for n in sizes) + " |")
    print("|---|---|---|---|" + "---:|" * len(sizes))
    rows = dict.fromkeys(key[:4] for key in result if key[0] == "target")
    for key in rows:
        print(f"| target | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(f"{result[(*key, n)]:.1f}" for n in sizes) + " |")
    for key in (k for k in result if k[0] == "draft"):
        print(f"| draft, 1 tok, last row | | {key[2]} | eager | {result[key]:.1f} |")
    packed = [k for k in rows if k[1] == "packed"]
    for key in packed:
        after = ("target", "rows", *key[2:])
        if after in rows:
            ratio = " | ".join(f"{result[(*after, n)] / result[(*key, n)]:.3f}" for n in sizes)
            print(f"| rows / packed | | {key[2]} | {key[3]} | {ratio} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default=None, help="fp32 or bf16 (default: the machine's)")
    p.add_argument("--sizes", default="1,2,4,6,8")
    p.add_argument("--paths", default="avx512,avx2")
    p.add_argument("--attention", default="packed,rows")
    p.add_argument("--runners", default="eager,static")
    p.add_argument("--draft", default="w8a8-v32k")
    p.add_argument("--kernel", default="w8a8", help="the target kernel: w8a8, or bf16 (the dense target; fp32 with --dtype fp32)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=None, help="torch's threads (default: torch's own; 1 where other jobs hold a core)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with torch.inference_mode():
        report(*measure(args))


if __name__ == "__main__":
    main()
