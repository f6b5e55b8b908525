"""`python -m specdec head train`: data, training and the stored head, within a time budget, resumable.

The working folder keeps the data shards, a checkpoint and `plan.json` (the target's key, the
recipe, the plan and the seconds spent so far). Run again with the same settings and it resumes
where it stopped; with other settings it says so and stops (use another --work folder), except
--steps: a resumed run may be given another total, and its schedule follows it from there. The budget
covers all of it: after the held-out data (a fixed amount), the target's answers get ANSWERS_SHARE
of the time left, reading text the next READ_SHARE, training the rest but END_SHARE of the whole
budget (the last figures and the file). Each data phase writes at least one shard.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec.kernels.head_offer import target_key
from specdec.train import gather
from specdec.train.data import read_json, write_json
from specdec.train.evaluate import Verdict
from specdec.train.recipe import Plan, Recipe

ANSWERS_SHARE, READ_SHARE, END_SHARE = 0.35, 0.2, 0.05


class Clock:
    """Seconds spent on this working folder, across interrupted runs."""

    def __init__(self, before: float):
        self.before, self.start = before, time.monotonic()

    @property
    def elapsed(self) -> float:
        return self.before + time.monotonic() - self.start

    def until(self, elapsed: float) -> float:
        """The time.monotonic() at which `elapsed` seconds will have been spent."""
        return self.start + elapsed - self.before


@dataclass
class Workspace:
    folder: Path
    record: dict  # plan.json

    @classmethod
    def open(cls, folder: Path, key: dict, recipe: Recipe, plan: Plan) -> "Workspace":
        """The folder's record, checked against these settings; a new record for an empty folder."""
        folder.mkdir(parents=True, exist_ok=True)
        record = read_json(folder / "plan.json", None)
        fresh = {"target": key, "recipe": recipe.as_dict(), "plan": plan.as_dict(), "elapsed": 0.0}
        if record is None:
            write_json(folder / "plan.json", fresh)
            return cls(folder, fresh)
        recorded = Recipe.recorded(record["recipe"]).as_dict()  # a field added since ran as before it (Recipe.recorded)
        asked = recipe.as_dict()
        differ = [f"{name} {recorded[name]} (given {asked[name]})" for name in asked if recorded.get(name) != asked[name]]
        differ += ["target"] if record["target"] != key else []
        differ += [f"seed {record['plan']['seed']} (given {plan.seed})"] if record["plan"]["seed"] != plan.seed else []
        if differ:
            raise ValueError(f"the working folder {folder} holds a run with other settings: {', '.join(differ)}; "
                             "pass those settings to resume it, another --work folder, or delete that one to start again")
        for name in ("answers", "code_tokens"):  # the data gathered so far was sized by these
            given, kept = getattr(plan, name), record["plan"].get(name)
            if given is not None and kept is not None and given != kept:
                raise ValueError(f"the working folder {folder} was planned with {name}={kept}, and {given} was given now")
            record["plan"][name] = kept if kept is not None else given
        given, kept = plan.steps, record["plan"].get("steps")
        if given is not None and kept is not None and given != kept:
            # Another total for a resumed run: the learning rate's schedule follows the new total from
            # the step the run resumes at (a longer run, or a shorter one that anneals sooner). Kept on
            # record, since the head then did not follow one schedule from start to end.
            record.setdefault("replanned", []).append({"steps_from": kept, "steps_to": given, "elapsed_s": round(record["elapsed"], 1)})
        record["plan"]["steps"] = kept if given is None else given
        return cls(folder, record)

    @property
    def plan(self) -> Plan:
        return Plan(**self.record["plan"])

    def decide(self, clock: Clock, **amounts) -> None:
        self.record["plan"].update(amounts)
        self.save(clock)

    def save(self, clock: Clock) -> None:
        self.record["elapsed"] = clock.elapsed
        write_json(self.folder / "plan.json", self.record)


def gather_data(pair, recipe: Recipe, space: Workspace, clock: Clock, bars: bool, root: Path | None) -> None:
    from tqdm.auto import tqdm

    plan = space.plan
    sources = gather.Sources.of(pair, recipe, plan.seed, root)
    with tqdm(desc="held-out data", unit="tok", disable=not bars) as bar:
        gather.held_out(pair, recipe, sources, space.folder, bar.update)
    if "deadlines" not in space.record:  # decided once, when the held-out data is in: a resumed run keeps them
        left = plan.minutes * 60 - clock.elapsed
        answers_end = clock.elapsed + ANSWERS_SHARE * left
        space.record["deadlines"] = {"answers": answers_end, "read": answers_end + READ_SHARE * left}
        space.save(clock)
    deadlines = space.record["deadlines"]
    with tqdm(desc="target's answers", unit="tok", disable=not bars) as bar:
        done = gather.answers_phase(pair, recipe, sources, space.folder, plan.answers, clock.until(deadlines["answers"]), bar.update)
    space.decide(clock, answers=plan.answers if plan.answers is not None else done)
    with tqdm(desc="target reads installed text", unit="tok", disable=not bars) as bar:
        done = gather.code_phase(pair, recipe, sources, space.folder, plan.code_tokens, clock.until(deadlines["read"]),
                                 plan.seed, bar.update, root)
    space.decide(clock, code_tokens=plan.code_tokens if plan.code_tokens is not None else done)


def train(pair, recipe: Recipe, plan: Plan, work: Path, out: Path, bars: bool = True, root: Path | None = None) -> dict:
    """The whole command: data, training, the head file at `out`. -> the head's record's figures."""
    from specdec.kernels.head_store import save_head
    from specdec.train.loop import Loop

    if recipe.fusion:
        raise ValueError("a head with fused features cannot draft yet (the runners hand it the last layer's rows only): "
                         "it is measured by scripts/head_ablation.py, not trained for use")
    key = target_key(pair)
    space = Workspace.open(Path(work), key, recipe, plan)
    clock = Clock(space.record["elapsed"])
    torch.manual_seed(plan.seed)
    gather_data(pair, recipe, space, clock, bars, root)
    loop = Loop.of(pair, recipe, space, autocast=pair.dtype == torch.bfloat16)
    if space.plan.steps is None:
        per_step = loop.time_steps(2)
        left = space.plan.minutes * 60 * (1 - END_SHARE) - clock.elapsed
        space.decide(clock, steps=max(1, int(left / per_step)))
    figures = loop.run(space, clock, bars)
    recipe_record = {**recipe.as_dict(), **space.plan.as_dict(), "vocab_source": "the target's greedy tokens in the training data",
                     **({"replanned": space.record["replanned"]} if "replanned" in space.record else {})}
    save_head(out, loop.trainer.head, key, recipe_record, figures, ids=loop.ids)
    return figures


@dataclass
class Evaluation:
    """A head judged on the held-out data: its verdicts and what they were judged on."""

    answers: Verdict  # on the held-out answers of the target
    reads: Verdict  # on the held-out read text
    kinds: list[str]  # the kind of text of each held-out answer, in order ([] where they cannot be matched up)
    ids: torch.Tensor  # (N,) the vocabulary the head drafted from
    answer_sequences: list  # the held-out answers themselves (their tokens: the vocabulary's coverage)
    read_sequences: list

    def by_kind(self) -> dict[str, list[int]]:
        """kind -> the indices of its held-out answers."""
        out: dict[str, list[int]] = {}
        for i, kind in enumerate(self.kinds):
            out.setdefault(kind, []).append(i)
        return out


def evaluation(pair, head, recipe: Recipe, work: Path, seed: int, root: Path | None = None, ids=None) -> Evaluation:
    """A head drafting from `ids` judged on the held-out data of the working folder (collected first when missing)."""
    from specdec.train.evaluate import judge
    from specdec.train.loop import held_out_judges

    work.mkdir(parents=True, exist_ok=True)
    # The held-out data, and the kind of each answer, are the folder's: gathered with the recipe it
    # recorded (the prompts' version above all), whatever recipe the judged head was trained with.
    record = read_json(work / "plan.json", None)
    data_recipe = Recipe.recorded(record["recipe"]) if record else recipe
    sources = gather.Sources.of(pair, data_recipe, seed, root)
    gather.held_out(pair, data_recipe, sources, work, lambda n: None)
    answers, reads, judges = held_out_judges(pair, recipe, work, ids)
    with torch.autocast(pair.device.type, dtype=torch.bfloat16, enabled=pair.dtype == torch.bfloat16):
        verdicts = judge(head, answers, judges[0], recipe.eval_depth), judge(head, reads, judges[1], recipe.eval_depth)
    kinds = sources.held_kinds if len(sources.held_kinds) == len(answers) else []
    return Evaluation(*verdicts, kinds, judges[0].ids, answers, reads)
