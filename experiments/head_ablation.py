"""Which recipe trains the better head: the same data and the same number of steps, one setting changed at a time.

Last changed at commit 67546e9 (the recipe's defaults, specdec/train/recipe.py, were chosen with it;
no table of it is quoted in docs/). An experiment kept for work on the head's training:

    nice -n 5 .venv/bin/python -m experiments.head_ablation --data DIR [--steps 40] [--threads 1] \
        [--variants base,random-init,depth-1,mlp-1024,ce-only]

DIR is a working folder of `python -m specdec head train` whose data is collected (for example one
run with `--steps 0`). Each variant trains in a folder of its own beside DIR, on links to DIR's
data shards, with the plan DIR recorded and `--steps` steps; the table gives its validation
acceptance by draft position on the held-out answers, the mean accepted length at K = 6, the
step-1 loss, and the seconds per step (the variants ran one after another on a shared machine:
compare the figures, not the times).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from specdec.models import machine
from specdec.models.pair import load_pair
from specdec.train.recipe import Plan, Recipe
from specdec.train.run import train

VARIANTS = {
    "base": {},
    "random-init": {"init": "random"},
    "depth-1": {"depth": 1},
    "mlp-1024": {"intermediate": 1024},
    "mlp-4096": {"intermediate": 4096},
    "ce-only": {"reg_weight": 0.0},
    "lr-3e-3": {"lr": 3e-3},
    "lr-3e-4": {"lr": 3e-4},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--variants", default="base,random-init,depth-1,mlp-1024,ce-only")
    parser.add_argument("--tag", default="", help="prefix of the variants' folders (a new series after a code change)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = Path(args.data)
    recorded = json.loads((data / "plan.json").read_text())
    pair = load_pair("qwen2.5-coder-1.5b/0.5b")
    rows = []
    for name in args.variants.split(","):
        recipe = dataclasses.replace(Recipe.recorded(recorded["recipe"]), **VARIANTS[name])
        work = data.with_name(f"{data.name}-{args.tag}{name}")
        work.mkdir(exist_ok=True)
        for shard in data.glob("*.safetensors"):
            if not (work / shard.name).exists():
                (work / shard.name).symlink_to(shard.resolve())
        plan = Plan(seed=recorded["plan"]["seed"], minutes=600, answers=recorded["plan"]["answers"],
                    code_tokens=recorded["plan"]["code_tokens"], steps=args.steps)
        start = time.perf_counter()
        figures = train(pair, recipe, plan, work, work / "head.safetensors", bars=True)
        rows.append((name, figures, (time.perf_counter() - start) / args.steps))
    print(f"{machine.cpu_model()} ({' '.join(machine.reported_flags())}), {torch.get_num_threads()} threads; "
          f"{rows[0][1]['train_tokens']} training tokens, {args.steps} steps each")
    print(f"{'variant':12s} {'acceptance by position 1..6':42s} {'mean@6':>6s} {'loss':>6s} {'s/step':>7s}")
    for name, figures, per_step in rows:
        acc = " ".join(f"{a:.3f}" for a in figures["acceptance_by_position"])
        loss = figures["loss"]
        print(f"{name:12s} {acc:42s} {figures['mean_accepted']:6.3f} {loss:6.3f} {per_step:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
