"""What recording the step detail costs, and that a normal run pays nothing for it.

    HF_HUB_OFFLINE=1 python scripts/detail_cost.py [--pair tiny-random] [--baseline /path/to/other/checkout]

Each measurement runs in a fresh process: load the pair, one warm-up run, then --runs timed runs
of --tokens new tokens (sampling, K = 5); it prints the median wall seconds per step. Variants
alternate round by round: this checkout with detail off (a normal run), with detail on (a
stepped run: DetailedDecoding), and, with --baseline, the engine of another checkout (e.g. one
from before the detail hook existed). tiny-random is the most sensitive pair for this: its passes
are so short that any per-step Python work shows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import statistics, sys, time
from specdec.core.config import GenerationConfig
from specdec.engines.assemble import generate
from specdec.models.pair import load_pair
pair_name, dtype, tokens, runs, detail = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
pair = load_pair(pair_name, device="cpu", dtype=dtype)
config = GenerationConfig(max_new_tokens=tokens, k=5, temperature=0.8, seed=1)
if detail:
    from specdec.engines.assemble import generate_detailed as generate
prompt = "def add(a, b):\\n    return a + b\\n\\ndef add(a, b):"
list(generate(pair, prompt, config))  # warm-up
per_step = []
for _ in range(runs):
    start = time.perf_counter()
    events = list(generate(pair, prompt, config))
    per_step.append((time.perf_counter() - start) / len(events))
print(statistics.median(per_step))
"""


def measure(path: Path, pair: str, dtype: str, tokens: int, runs: int, detail: bool) -> float:
    env = dict(os.environ, PYTHONPATH=str(path), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", CHILD, pair, dtype, str(tokens), str(runs), "1" if detail else "0"],
                         cwd=path, env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default="tiny-random")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--baseline", type=Path, help="another checkout whose engine has no detail hook")
    args = p.parse_args(argv)
    variants = {"detail off": (ROOT, False), "detail on": (ROOT, True)}
    if args.baseline:
        variants = {"baseline": (args.baseline, False), **variants}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        names = list(variants)[r % len(variants):] + list(variants)[: r % len(variants)]  # rotate the order
        for name in names:
            path, detail = variants[name]
            seconds[name].append(measure(path, args.pair, args.dtype, args.tokens, args.runs, detail))
            print(f"round {r + 1} {name}: {1000 * seconds[name][-1]:.2f} ms per step", file=sys.stderr, flush=True)
    ref = statistics.median(seconds["detail off"])
    print(f"{args.pair} {args.dtype}, {args.tokens} tokens, sampling, K = 5; median over {args.rounds} rounds "
          f"of the median of {args.runs} runs, ms per step:")
    for name, values in seconds.items():
        m = statistics.median(values)
        print(f"  {name:<11} {1000 * m:8.2f}  ({m / ref:.3f} x detail off; rounds {', '.join(f'{1000 * v:.2f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
