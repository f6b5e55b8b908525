"""Per runner (eager, static, compiled): what one pass of the pair's target and draft costs here.

    flock /tmp/specdec-bench.lock .venv/bin/python scripts/runner_passes.py --runners eager,static,compiled
    ... --target-kernel w8a8 --draft-variant w8a8-v32k   (the models as those run them; default bf16, stock)

After a cache of `--context` positions, each runner's models (specdec.core.runners) time the
target's pass over each of `--sizes` tokens (a decode step is 1; a check of K + 1) and the draft's
one-token pass (last row only, as the drafter asks). Runners and sizes alternate within each of
`--repeats` rounds, so load from other processes spreads over all of them; the figures are medians
(ms), with each runner's ratio to eager measured in the same run. A compiled runner's capture
(torch.compile on a CPU, CUDA graphs on a GPU) happens first and is reported apart (seconds per
shape): what a process pays once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.kernels.target_kernels import kernel_target  # noqa: E402
from specdec.kernels.variants import draft_model  # noqa: E402
from specdec.measure.passcost import prefilled, time_passes  # noqa: E402
from specdec.models.machine import cpu_flags  # noqa: E402
from specdec.models.pair import load_pair  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default=None)
    p.add_argument("--dtype", default=None)
    p.add_argument("--runners", default="eager,static")
    p.add_argument("--sizes", default="1,6")
    p.add_argument("--context", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--target-kernel", default="bf16")
    p.add_argument("--draft-variant", default="stock")
    args = p.parse_args()
    runners = args.runners.split(",")
    sizes = [int(n) for n in args.sizes.split(",")]
    pair = load_pair(args.pair, dtype=args.dtype)
    context = [(i * 7919 + 13) % pair.vocab_size for i in range(args.context)]
    feed = context[: max(sizes)]
    target, draft = kernel_target(pair, args.target_kernel), draft_model(pair, args.draft_variant)
    print(f"{pair.name}, {pair.dtype_name}, {pair.device}, target {args.target_kernel}, draft {args.draft_variant}, "
          f"context {args.context}, CPU flags "
          f"{' '.join(f for f in ('avx2', 'avx512f', 'avx512_bf16', 'avx512_vnni', 'amx_bf16') if f in cpu_flags())}")
    times = {}  # (model, runner, size) -> seconds of each round
    with ExitStack() as stack:
        models = {}
        for runner in runners:
            models["target", runner] = stack.enter_context(
                prefilled(runner, target, pair.vocab_size, context, max(sizes), [(n, False) for n in sizes]))
            models["draft", runner] = stack.enter_context(prefilled(runner, draft, pair.vocab_size, context, 1, [(1, True)]))
        for (name, runner), lm in models.items():
            captured = getattr(lm, "capture_s", {})
            if captured:
                print(f"{name} {runner}: captured {', '.join(f'{n} tokens {s:.1f} s' for (n, _), s in captured.items())}")
            time_passes(lm, feed, sizes if name == "target" else [1], 1, last_only=name == "draft")  # warm-up
        for _ in range(args.repeats):
            for (name, runner), lm in models.items():
                for n in sizes if name == "target" else [1]:
                    (seconds,) = time_passes(lm, feed, [n], 1, last_only=name == "draft")
                    times.setdefault((name, runner, n), []).append(seconds)
    print(f"{'pass':<16} " + " ".join(f"{r:>10}" for r in runners) + "   " + " ".join(f"{r + '/eager':>15}" for r in runners[1:]))
    for name, n in [("target", n) for n in sizes] + [("draft", 1)]:
        med = {r: statistics.median(times[name, r, n]) for r in runners}
        ratios = " ".join(f"{med[r] / med[runners[0]]:>15.3f}" for r in runners[1:])
        print(f"{name + f' {n} tok':<16} " + " ".join(f"{1000 * med[r]:>8.1f}ms" for r in runners) + "   " + ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
