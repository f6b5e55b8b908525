"""The head's ablations at equal data: EAGLE-3's fused features, the feature regression, and the
last-layer start, each against the recipe as the ablations measured it (BASE), trained the same
number of steps on the same data (docs/benchmarks.md, "The head's ablations at equal data").

    HF_HUB_OFFLINE=1 python -m scripts.head_ablation --answers 320 --code-tokens 32768 --steps 250

The data is gathered once, keeping the target's low and middle layers' rows beside its features
(Recipe.fusion), in a working folder of its own; each arm trains in a folder beside it that links
the data, and writes its figures there when done. Run again and it resumes: the data shards and
the arms already done are kept, an arm cut short goes on from its checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

# The recipe every arm changes one thing of: the shipped head's start (the target's last layer). The
# recipe's default has since become the random start these arms found faster, and its prompts version 2;
# pinning the base keeps each arm what its folder and the recorded table say it is.
BASE = {"init": "last-layer", "prompts": 1}
ARMS = {  # name -> the arm's changes from BASE
    "base": {},
    "fusion": {"fusion": True},
    "no-regression": {"reg_weight": 0.0},
    "random-init": {"init": "random"},
}


@dataclass
class ArmSpace:
    """What the training loop reads of a working folder: the data (linked), the plan, a checkpoint."""

    folder: Path
    plan: object

    def save(self, clock) -> None:
        pass  # the arm's plan is fixed by the command line; the checkpoint is the loop's own


def link_data(data: Path, arm: Path) -> None:
    arm.mkdir(parents=True, exist_ok=True)
    for shard in data.glob("*.safetensors"):
        if not (arm / shard.name).exists():
            os.symlink(shard.resolve(), arm / shard.name)


def row(name: str, figures: dict) -> str:
    """One arm's line: position 1 from every start and as a run drafts, drafts kept per step, read text, loss."""
    walk, read_walk = figures["walk"], figures["read_text"]["walk"]
    cells = [figures["acceptance_by_position"][0], walk["rates"][0], walk["accepted_per_step"], read_walk["rates"][0]]
    shown = " | ".join("-" if c is None else f"{c:.3f}" for c in cells)
    return f"| {name} | {shown} | {figures['loss']:.3f} | {figures['minutes']} |"


def main(argv: list[str] | None = None) -> int:
    import torch

    from specdec.models.bundle import cache_root
    from specdec.models.pair import load_pair
    from specdec.train.loop import Loop
    from specdec.train.recipe import Plan, Recipe
    from specdec.train.run import Clock, Workspace, gather_data
    from specdec.kernels.head_offer import slug, target_key

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", default=None)
    p.add_argument("--answers", type=int, default=320, help="prompts the target answers for training (default 320)")
    p.add_argument("--code-tokens", type=int, default=32768, help="tokens of installed text read for training (default 32768)")
    p.add_argument("--steps", type=int, default=250, help="optimizer steps of every arm (default 250)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--intermediate", type=int, default=None, help="the head's MLP width (default: the recipe's)")
    p.add_argument("--work", help="working folder (default: in the cache, per pair and seed)")
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or args.steps < 1 or args.answers < 1 or args.code_tokens < 0:
        p.error(f"unknown arm(s) {', '.join(unknown)}" if unknown else "--steps and --answers must be >= 1, --code-tokens >= 0")

    pair = load_pair(args.pair)
    work = Path(args.work) if args.work else cache_root() / "head-ablation" / f"{slug(pair.name)}-{target_key(pair)['weights_sha256'][:12]}-seed{args.seed}"
    data_recipe = Recipe(**{**BASE, "fusion": True})  # the data keeps the layers' rows every arm may read
    plan = Plan(seed=args.seed, minutes=10_000.0, answers=args.answers, code_tokens=args.code_tokens, steps=args.steps)
    space = Workspace.open(work / "data", target_key(pair), data_recipe, replace(plan, steps=None))  # the arms carry the steps
    gather_data(pair, data_recipe, space, Clock(space.record["elapsed"]), True, None)
    print(f"data: {work / 'data'} ({space.record['elapsed'] / 60:.1f} minutes so far)", file=sys.stderr)

    results = {}
    for name in arms:
        arm = work / f"arm-{name}-{args.steps}"
        done = arm / "figures.json"
        if not done.exists():
            link_data(work / "data", arm)
            base = Recipe() if args.intermediate is None else Recipe(intermediate=args.intermediate)
            recipe = replace(base, **{**BASE, **ARMS[name]})
            arm_space = ArmSpace(arm, plan)
            loop = Loop.of(pair, recipe, arm_space, autocast=pair.dtype == torch.bfloat16)
            figures = loop.run(arm_space, Clock(0.0), True)
            done.write_text(json.dumps({"recipe": recipe.as_dict(), **figures}, indent=1))
        results[name] = json.loads(done.read_text())

    print(f"\n{args.steps} steps per arm on the same data ({results[arms[0]]['train_tokens']} tokens); held-out answers and read text of seed {args.seed}\n")
    print("| arm | position 1, every start | position 1, as a run drafts | drafts kept per step (K = 5) | read text, position 1 as a run drafts | loss | minutes |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in arms:
        print(row(name, results[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
