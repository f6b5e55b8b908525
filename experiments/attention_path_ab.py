"""The batch-invariant attention's AVX-512 path against its AVX2 path, side by side in one process:
the kernel alone on the target's shapes, then whole eager passes of the embedded pair's target
kernels and a draft variant, each timed on both paths round by round (specdec.measure.passcost.
time_rounds) after the same cached context; medians and their ratio. Both paths give the same bits
(tests/test_batch_invariance.py); the kernel picks AVX-512 by itself where the CPU has it.

    HF_HUB_OFFLINE=1 .venv/bin/python -m experiments.attention_path_ab [--target-kernel w4a8,w8a8] \
        [--draft-variant w4a8-v16k] [--positions 200,1000] [--sizes 1,4] [--repeats 9]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch

from experiments import pass_models
from specdec.core.runners.eager_model import CachedModel
from specdec.kernels import w8a8_build
from specdec.kernels.attention import PATH_ENV
from specdec.kernels.cpu_linear import linear_for
from specdec.measure.passcost import Lane, filler_ids, time_rounds
from specdec.models.machine import cpu_model
from specdec.models.pair import load_pair

PATHS = ("avx2", "avx512")


@contextlib.contextmanager
def attention_path(name: str):
    """$SPECDEC_ATTENTION_PATH set to `name` inside (row_attention reads it on every call)."""
    before = os.environ.get(PATH_ENV)
    os.environ[PATH_ENV] = name
    try:
        yield
    finally:
        if before is None:
            del os.environ[PATH_ENV]
        else:
            os.environ[PATH_ENV] = before


def kernel_alone(positions, sizes, repeats: int) -> None:
    """The op on the 1.5B target's shapes (12 query heads, 2 key/value heads, 128 columns, bf16)."""
    op, g = torch.ops.specdec.attention_rows, torch.Generator().manual_seed(0)
    print(f"{'kernel alone':12s} {'cached':>6s} {'rows':>4s} {'avx2 us':>8s} {'avx512 us':>10s} {'avx512 / avx2':>14s}")
    for cached in positions:
        for rows in sizes:
            q = torch.randn(1, 12, rows, 128, generator=g).bfloat16()
            k, v = (torch.randn(1, 2, cached + rows, 128, generator=g).bfloat16() for _ in range(2))
            runs = {path: [] for path in PATHS}
            for _ in range(20 * repeats):
                for path in PATHS:
                    start = time.perf_counter()
                    op(q, k, v, None, 128**-0.5, w8a8_build.PATHS[path])
                    runs[path].append(time.perf_counter() - start)
            a, b, ratio = pass_models.compared(*(runs[path] for path in PATHS))
            print(f"{'':12s} {cached:6d} {rows:4d} {1e6 * a:8.1f} {1e6 * b:10.1f} {ratio:14.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    pass_models.add_arguments(p)
    p.add_argument("--positions", default="200,1000", help="cached positions before the timed passes, comma-separated")
    args = p.parse_args()
    positions = tuple(int(n) for n in args.positions.split(","))
    sizes = pass_models.sizes(args)
    w8a8_build.load()
    print(f"{cpu_model()}, {torch.get_num_threads()} threads, medians of {args.repeats} rounds")
    kernel_alone(positions, sizes, args.repeats)
    pair = load_pair("qwen2.5-coder-1.5b/0.5b")
    models = pass_models.models(pair, args)
    print(f"{'model':12s} {'cached':>6s} {'tokens':>6s} {'avx2 ms':>8s} {'avx512 ms':>10s} {'avx512 / avx2':>14s}")
    for cached in positions:
        context = filler_ids(pair.vocab_size, cached + max(sizes))
        lanes = {}
        for name, (model, lane_sizes, last_only) in models.items():
            for path in PATHS:
                lm = CachedModel(model, pair.vocab_size, linear_for(model), positions=cached + 64)
                lm.prefill(torch.tensor(context[:cached]))
                lanes[name, path] = Lane(lm, lane_sizes, last_only, around=lambda path=path: attention_path(path))
        runs = time_rounds(lanes, context[cached:], args.repeats)
        for name, (_, lane_sizes, _) in models.items():
            for n in lane_sizes:
                a, b, ratio = pass_models.compared(*(runs[(name, path), n] for path in PATHS))
                print(f"{name:12s} {cached:6d} {n:6d} {1e3 * a:8.1f} {1e3 * b:10.1f} {ratio:14.3f}")
        del lanes


if __name__ == "__main__":
    main()
