"""The speculative decoding loop: draft -> verify -> accept -> roll back caches, one event per step.

Cache invariant: after every step the target's cache holds exactly the sequence minus its last
token (that token is fed at the start of the next target pass, followed by the new drafts); a
draft model's cache holds the same, or one position less after a fully accepted draft (its last
draft token and the bonus token are fed together at the start of the next draft).
Plain decoding is this same loop with nothing drafted: one token per target pass.
How many tokens to draft each step is a K policy's choice (specdec.core.k_policy), made from counts and
a cost table fixed before the run, never from the clock, so seeded runs are reproducible.
The loop runs what it is handed (specdec.core.run_parts.RunParts; specdec.engines.assemble builds it):
who drafts (specdec.core.proposers) and the tensors of a step (specdec.core.runners: the target,
acceptance, the one read) are the parts'. The loop keeps the sequence, the policy and the events.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from specdec.core.config import GenerationConfig
from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, FINISH_EOS, FINISH_LENGTH, PLAIN, StepEvent
from specdec.core.k_policy import Choice, make_policy
from specdec.core.proposers import candidates, proposers_for
from specdec.core.run_parts import RunParts
from specdec.core.runners.runner import Checked
from specdec.core.text import TextTracker


class Decoding:
    """One generation run; iterate it for the StepEvents. Its caches are open to inspection
    (the tests check the rollback after every step)."""

    def __init__(self, parts: RunParts, prompt_ids: list[int], config: GenerationConfig,
                 stop: threading.Event | None = None):
        self.parts, self.config, self.stop = parts, config, stop
        self.generator = torch.Generator(device=parts.device).manual_seed(config.seed)  # seeded once per run
        self.proposers = proposers_for(parts, config, self.generator)  # who may draft (candidates() says who may each step)
        self.runner = parts.runner(parts, config, self.generator, self.proposers)  # the run's tensor side
        self.policy = make_policy(config, parts.costs, parts.head.prior if parts.head is not None else None)
        self.seq = list(prompt_ids)  # prompt + emitted tokens
        self.text = TextTracker(parts.tokenizer, self.seq)
        self.total = 0  # new tokens emitted so far
        self.clock = RunClock()

    @property
    def target(self):
        """The target as this run runs it (its length, forward and crop: specdec.measure.passcost times it)."""
        return self.runner.target

    @property
    def details(self):
        """What the step panel shows of each step (a run built detailed: specdec.core.runners.recording); else None."""
        return self.runner.details

    def __iter__(self) -> Iterator[StepEvent]:
        try:
            yield from self.steps()
        finally:
            self.runner.close()  # also when the consumer drops the run between two events

    def steps(self) -> Iterator[StepEvent]:
        self.runner.prefill(self.seq, self.config.max_new_tokens)
        self.clock.start()
        for step in range(self.config.max_new_tokens):
            if self.stop is not None and self.stop.is_set():
                return
            options = candidates(self.proposers, self.seq)
            index, choice = self.policy.choose_among([(p.name, p.unseen(self.seq)) for p in options])
            proposer = options[index] if options else None
            who = proposer.name if proposer is not None else ""
            k = min(choice.k, self.config.max_new_tokens - self.total - 1)  # room for the target's own token
            if proposer is not None and k > 0:
                with self.clock.held():  # what it left unread (the draft model: the prompt) is prompt processing
                    proposer.ready(self.runner)
            checked = self.runner.check(self.seq, proposer, k)
            event = self.commit(step, checked, choice, k)
            with self.clock.held():  # the consumer's time with the event is not the run's
                yield event
            if event.finish is not None:
                return
            # A draft the drafter withdrew as unsure counts as drafted and turned down: the estimate stays
            # the acceptance of what it would have drafted, and falls on text where it is always unsure.
            drafted = len(event.drafted) + (1 if checked.withdrawn_why else 0)
            self.policy.update(choice, drafted, event.accepted, checked.drafter or who)  # counts only, never the clock

    def commit(self, step: int, checked: Checked, choice: Choice, k: int) -> StepEvent:
        """Keep what the target accepted (the caches rolled back to it) and describe the step."""
        kept = cut(checked, self.parts.eos_ids, room=self.config.max_new_tokens - self.total)
        length_before = len(self.seq)
        self.seq.extend(kept.emitted)
        self.runner.keep(length_before, kept.accepted, len(self.seq))
        self.total += len(kept.emitted)
        return self.describe(step, checked, kept, choice, k)

    def describe(self, step: int, checked: Checked, kept: "Kept", choice: Choice, k: int) -> StepEvent:
        """The step's event: the ids, their display text, the numbers that decided them."""
        text, n = self.text, kept.accepted
        accepted_text = text.commit(kept.drafted[:n])
        rejected_text = text.pieces(kept.drafted[n:])
        emitted_text = accepted_text + (text.commit(kept.emitted[n:]) if kept.kind != EOS_ACCEPTED else [])
        if kept.finish is not None and text.remainder():
            emitted_text[-1] += text.remainder()  # an unfinished character at the very end
        drafted = len(kept.drafted)
        return StepEvent(
            step=step, drafted=tuple(kept.drafted), accepted=n, emitted=tuple(kept.emitted), kind=kept.kind,
            p_target=tuple(checked.p_target[:drafted]), p_draft=tuple(checked.p_draft[:drafted]),
            draft_s=checked.draft_s, verify_s=checked.verify_s, total_tokens=self.total, elapsed_s=self.clock.seconds(),
            emitted_text=tuple(emitted_text), drafted_text=tuple(accepted_text + rejected_text),
            margins=tuple(checked.margins[: len(kept.emitted)]), k=k, greedy=self.config.greedy, finish=kept.finish,
            paused=choice.paused, drafter=checked.drafter if drafted else "", predicted_tok_s=choice.predicted_tok_s,
            paused_why=choice.why, withdrawn_why=checked.withdrawn_why,
        )


@dataclass(frozen=True)
class Kept:
    """What a step keeps of what its check decided, once the end of the run is applied."""

    drafted: list[int]  # the drafts that count (cut after an accepted end-of-sequence token)
    accepted: int
    emitted: list[int]  # drafted[:accepted] + the target's token (without it when an accepted draft ended the run)
    kind: str  # of the last emitted token: PLAIN, BONUS, CORRECTION or EOS_ACCEPTED
    finish: str | None  # FINISH_EOS, FINISH_LENGTH, or None: the run goes on


def cut(checked: Checked, eos_ids: frozenset[int], room: int) -> Kept:
    """The step's tokens, ended where the run ends: at an end-of-sequence token, even inside the
    accepted drafts, or once `room` (new tokens the run may still add) is used up."""
    drafted, n = checked.drafted, checked.accepted
    emitted = drafted[:n] + [checked.token]
    kind = PLAIN if not drafted else BONUS if n == len(drafted) else CORRECTION
    finish = None
    eos_at = next((i for i, t in enumerate(emitted) if t in eos_ids), None)
    if eos_at is not None:
        finish = FINISH_EOS
        if eos_at < n:  # an accepted draft ended the run: no target token follows it
            drafted, n, emitted, kind = drafted[: eos_at + 1], eos_at + 1, emitted[: eos_at + 1], EOS_ACCEPTED
    if finish is None and len(emitted) >= room:
        finish = FINISH_LENGTH
    return Kept(drafted, n, emitted, kind, finish)


class RunClock:
    """The run's own time: from the first step, leaving out the time the consumer held the run
    between events (drawing a page, waiting for "Step") and the draft model's reading of the prompt
    at its first draft (prompt processing, as the target's before the first step)."""

    def __init__(self):
        self.began, self.held_s = 0.0, 0.0

    def start(self) -> None:
        self.began, self.held_s = time.perf_counter(), 0.0

    def seconds(self) -> float:
        return time.perf_counter() - self.began - self.held_s

    @contextmanager
    def held(self):
        handed_over = time.perf_counter()
        try:
            yield
        finally:
            self.held_s += time.perf_counter() - handed_over
