"""The training loop: steps, validation figures along the way (the curve), checkpoints, the last figures."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from specdec.kernels.head_offer import head_ids
from specdec.measure.positions import PositionAcceptance
from specdec.models.machine import cpu_model, reported_flags
from specdec.train.data import load_split, windows
from specdec.train.evaluate import Judge, Verdict, judge
from specdec.train.recipe import Recipe
from specdec.train.trainer import Trainer, epoch_batches, learning_rate, new_head
from specdec.train.vocabulary import training_vocabulary

def held_out_judges(pair, recipe: Recipe, folder, ids=None) -> tuple[list, list, tuple[Judge, Judge]]:
    """The held-out answers and read text of the working folder, and a Judge for each: the head
    drafting from `ids` (default: the shipped list's recipe.vocab most frequent tokens)."""
    target = pair.target
    ids = head_ids(pair, recipe.vocab) if ids is None else ids
    judge_with = Judge(target.get_input_embeddings(), target.get_output_embeddings().weight.detach(), ids)
    val = load_split(folder, "val")
    answers, reads = [s for s in val if s.answer_from > 0], [s for s in val if s.answer_from == 0]
    return answers, reads, (judge_with, judge_with)


CHECKPOINT_S = 120.0  # seconds between checkpoints (and one at every validation)
CURVE_POINTS = 8  # validations over a run, besides the one before the first step
CURVE_ANSWERS = 16  # held-out answers judged for the curve (all of them at the end)


@dataclass
class Loop:
    trainer: Trainer
    recipe: Recipe
    windows: list
    answers: list  # held-out self-distilled answers
    reads: list  # held-out read text
    judges: tuple[Judge, Judge]
    ids: torch.Tensor  # (N,) the vocabulary the head drafts from, counted from the training data (specdec/train/vocabulary.py)

    @classmethod
    def of(cls, pair, recipe: Recipe, space, autocast: bool) -> "Loop":
        head = new_head(pair.target, recipe, space.plan.seed)
        trainer = Trainer(head, pair.target.get_input_embeddings(), pair.target.get_output_embeddings().weight, recipe, autocast)
        train = load_split(space.folder, "train")
        ids = training_vocabulary(pair, train, recipe.vocab)
        answers, reads, judges = held_out_judges(pair, recipe, space.folder, ids)
        return cls(trainer, recipe, windows(train, recipe.window), answers, reads, judges, ids)

    def batch(self, seed: int, step: int) -> list:
        """The windows of optimizer step `step` (epochs follow one another)."""
        epoch = 0
        while True:
            batches = epoch_batches(self.windows, self.recipe, seed, epoch)
            if step < len(batches):
                return [self.windows[i] for i in batches[step]]
            step -= len(batches)
            epoch += 1

    def time_steps(self, n: int) -> float:
        """Seconds per optimizer step, timed on a copy of the head (the run itself is untouched)."""
        t = self.trainer
        probe = Trainer(copy.deepcopy(t.head), t.embed, t.lm_weight, t.recipe, t.autocast)
        probe.step(self.batch(0, 0), 0.0)  # the first step also allocates
        start = time.perf_counter()
        for i in range(n):
            probe.step(self.batch(0, i + 1), 0.0)
        return (time.perf_counter() - start) / n

    def validate(self, which: int = 0, limit: int | None = None) -> Verdict:
        """The head judged on the held-out answers (which=0) or read text (1), the first `limit` sequences."""
        sequences = (self.answers, self.reads)[which][:limit]
        with self.trainer.autocasting():
            return judge(self.trainer.head, sequences, self.judges[which], self.recipe.eval_depth, self.trainer.fusion)

    def run(self, space, clock, bars: bool) -> dict:
        from tqdm.auto import tqdm

        plan = space.plan
        state = self.trainer.restore(space.folder / "checkpoint.pt") or {"step": 0, "tokens": 0, "curve": []}
        every = max(1, plan.steps // CURVE_POINTS)
        if not state["curve"]:
            state["curve"].append(point(0, 0, self.validate(limit=CURVE_ANSWERS)))
        saved = time.monotonic()
        with tqdm(total=plan.steps, initial=state["step"], desc="training the head", unit="step", disable=not bars) as bar:
            bar.set_postfix_str(short(state["curve"][-1]))
            while state["step"] < plan.steps:
                batch = self.batch(plan.seed, state["step"])
                self.trainer.step(batch, learning_rate(self.recipe, state["step"], plan.steps))
                state["step"] += 1
                state["tokens"] += sum(len(w) for w in batch)
                bar.update()
                if state["step"] % every == 0 or state["step"] == plan.steps:
                    state["curve"].append(point(state["step"], state["tokens"], self.validate(limit=CURVE_ANSWERS)))
                    bar.set_postfix_str(short(state["curve"][-1]))
                if state["step"] % every == 0 or time.monotonic() - saved > CHECKPOINT_S or state["step"] == plan.steps:
                    space.save(clock)
                    self.trainer.save(space.folder / "checkpoint.pt", state)
                    saved = time.monotonic()
        return self.figures(state, clock)

    def figures(self, state: dict, clock) -> dict:
        """The last figures, on every held-out answer and on the held-out read text."""
        data = sum(len(w) for w in self.windows)
        return {**final_figures(self.validate(), self.validate(1)),
                "train_tokens": data, "tokens_seen": state["tokens"], "steps": state["step"], "minutes": round(clock.elapsed / 60, 1),
                "curve": state["curve"], "cpu": f"{cpu_model()} ({' '.join(reported_flags())})"}


def final_figures(answers: Verdict, reads: Verdict) -> dict:
    """A head file's validation figures: on every held-out answer, and on the held-out read text."""
    final, read = point(0, 0, answers), point(0, 0, reads)
    return {"acceptance_by_position": final["acceptance"], "agreement_by_position": final["agreement"],
            "mean_accepted": final["mean_accepted"], "loss": final["loss"], "walk": final["walk"], "val_answer_drafts": final["tested"],
            "read_text": {k: read[k] for k in ("acceptance", "agreement", "mean_accepted", "walk")}}


def point(step: int, tokens: int, verdict: Verdict) -> dict:
    c = verdict.counts
    return {"step": step, "tokens": tokens, "acceptance": [round(a, 4) for a in c.acceptance],
            "agreement": [round(a, 4) for a in c.agreement], "mean_accepted": round(c.mean_accepted, 4),
            "loss": round(verdict.loss, 4), "tested": int(c.tested[0]) if c.tested.numel() else 0,
            "walk": walk_figures(verdict.walked(), verdict.walk_k)}


def walk_figures(w: PositionAcceptance, k: int) -> dict:
    """The walk's figures as a run's would read (specdec.train.evaluate.walk): acceptance by position
    at the steps' starts, drafts kept per step, the steps."""
    kept = sum(n * count for n, count in enumerate(w.lengths))
    return {"k": k, "rates": [None if r is None else round(r, 4) for r in w.rates],
            "accepted_per_step": round(kept / w.steps, 4) if w.steps else None, "steps": w.steps}


def short(p: dict) -> str:
    walk = p["walk"]["rates"][:2] + [None, None]
    as_run = " ".join("-" if r is None else f"{r:.2f}" for r in walk[:2])
    return (f"val acc@1 {p['acceptance'][0]:.2f} @2 {p['acceptance'][1]:.2f} mean {p['mean_accepted']:.2f}; "
            f"as a run drafts @1 @2 {as_run}; loss {p['loss']:.2f}")
