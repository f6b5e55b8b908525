"""The speculative decoding loop: draft -> verify -> accept -> roll back caches, one event per step.

Cache invariant: after every step the target's cache holds exactly the sequence minus its last
token (that token is fed at the start of the next target pass, followed by the new drafts); the
draft model's cache holds the same, or one position less after a fully accepted draft (its last
draft token and the bonus token are fed together at the start of the next draft).
Plain decoding is this same loop with nothing drafted: one token per target pass.
How many tokens to draft each step is a K policy's choice (specdec.core.k_policy), made from counts and
a cost table fixed before the run, never from the clock, so seeded runs are reproducible.
The loop runs what it is handed (specdec.core.run_parts.RunParts); specdec.engines.assemble builds it.
The tensors of a step (the models, their caches, the acceptance rule, the one read) are its runner's
(specdec.core.runners: eager, static or compiled, chosen when the parts were built); the loop itself
keeps the sequence, the K policy, prompt lookup and the events, the same whatever runs the tensors.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import torch

from specdec.core.acceptance import greedy_accept, speculative_sample
from specdec.core.config import GenerationConfig
from specdec.core.drafters import Draft, LookupDrafter
from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, FINISH_EOS, FINISH_LENGTH, PLAIN, StepEvent
from specdec.core.k_policy import Choice, CostK, make_policy
from specdec.core.run_parts import RunParts
from specdec.core.runners.reading import Checked
from specdec.core.text import TextTracker


class Decoding:
    """One generation run; iterate it for the StepEvents. Its caches are open to inspection
    (the tests check the rollback after every step)."""

    def __init__(self, parts: RunParts, prompt_ids: list[int], config: GenerationConfig,
                 stop: threading.Event | None = None):
        self.parts, self.config, self.stop = parts, config, stop
        self.generator = torch.Generator(device=parts.device).manual_seed(config.seed)  # seeded once per run
        self.costs = parts.costs  # the cost table (cost K policy only), fixed before the run's clock
        self.runner = parts.runner(parts, config, self.generator, self.verify)  # the run's tensor side
        # With the draft model behind it ("auto"), lookup must match at least 2 tokens: a lone
        # 1-token match guesses worse than the draft model (on the bench prompts, acceptance 0.47
        # against 0.58, and 1.31x against 1.51x over plain; docs/benchmarks.md).
        min_ngram = 2 if config.drafter == "auto" else 1
        self.lookup = LookupDrafter(config.lookup_ngram, min_ngram) if config.drafter in ("lookup", "auto") else None
        self.seq = list(prompt_ids)  # prompt + emitted tokens

    @property
    def target(self):
        """The target as this run runs it (its length, forward and crop: specdec.measure.passcost times it)."""
        return self.runner.target

    def __iter__(self) -> Iterator[StepEvent]:
        try:
            yield from self.steps()
        finally:
            self.runner.close()  # also when the consumer drops the run between two events

    def steps(self) -> Iterator[StepEvent]:
        config, stop, seq = self.config, self.stop, self.seq
        policy = make_policy(config.policy if config.drafter != "none" else "fixed", config.k, config.k_max, self.costs)
        text = TextTracker(self.parts.tokenizer, seq)
        self.runner.prefill(seq, config.max_new_tokens)

        start = time.perf_counter()
        held_s = 0.0  # time the consumer held the run between events (drawing a page, waiting for "Step")
        total = 0

        def clock() -> float:  # the run's own time: the consumer's holds left out
            return time.perf_counter() - start - held_s

        for step in range(config.max_new_tokens):
            if stop is not None and stop.is_set():
                return
            source = drafter_at(seq, config, self.lookup) if isinstance(policy, CostK) else "model"
            choice = policy.choose(source) if config.drafter != "none" else Choice(0)
            # Leave room for the target's own token so a step never overshoots max_new_tokens.
            k = min(choice.k, config.max_new_tokens - total - 1)
            checked = self.check(k)
            event = self.commit(step, checked, choice, k, total, text, clock)
            total = event.total_tokens
            handed_over = time.perf_counter()
            yield event
            held_s += time.perf_counter() - handed_over
            if event.finish is not None:
                return
            policy.update(choice, len(event.drafted), event.accepted, checked.source or source)  # counts only, never the clock

    def check(self, k: int) -> Checked:
        """The tensor step: prompt lookup's ids when it has a match (found on the host), else up to k
        tokens from the draft model, checked by the runner (specdec.core.runners)."""
        lookup = self.lookup.propose_ids(self.seq, k) if k > 0 and self.lookup is not None else []
        return self.runner.check(self.seq, k, lookup)

    def commit(self, step: int, checked: Checked, choice: Choice, k: int, total: int, text: TextTracker,
               elapsed: Callable[[], float]) -> StepEvent:
        """Keep what the target accepted (both caches rolled back to it) and describe the step.
        total: tokens emitted before this step; elapsed: the run's clock, read when the event is made."""
        config = self.config
        drafted, n, p_target, p_draft = checked.drafted, checked.accepted, checked.p_target, checked.p_draft
        emitted = drafted[:n] + [checked.token]
        kind = PLAIN if not drafted else BONUS if n == len(drafted) else CORRECTION
        finish = None

        # An end-of-sequence token ends the run where it stands, even inside the accepted drafts.
        eos_at = next((i for i, t in enumerate(emitted) if t in self.parts.eos_ids), None)
        if eos_at is not None:
            finish = FINISH_EOS
            if eos_at < n:
                drafted, n, emitted, kind = drafted[: eos_at + 1], eos_at + 1, emitted[: eos_at + 1], EOS_ACCEPTED
                p_target, p_draft = p_target[: n], p_draft[: n]

        # Roll back: drop what the target rejected from both caches.
        length_before = len(self.seq)
        self.seq.extend(emitted)
        self.runner.keep(length_before, n, len(self.seq))

        accepted_text = text.commit(drafted[:n])
        rejected_text = text.pieces(drafted[n:])
        emitted_text = accepted_text + (text.commit(emitted[n:]) if kind != EOS_ACCEPTED else [])
        total += len(emitted)
        if finish is None and total >= config.max_new_tokens:
            finish = FINISH_LENGTH
        if finish is not None and text.remainder():
            emitted_text[-1] += text.remainder()  # an unfinished character at the very end
        return StepEvent(
            step=step, drafted=tuple(drafted), accepted=n, emitted=tuple(emitted), kind=kind,
            p_target=tuple(p_target), p_draft=tuple(p_draft), draft_s=checked.draft_s, verify_s=checked.verify_s,
            total_tokens=total, elapsed_s=elapsed(), emitted_text=tuple(emitted_text),
            drafted_text=tuple(accepted_text + rejected_text), margins=tuple(checked.margins[: len(emitted)]),
            k=k, greedy=config.greedy, finish=finish, paused=choice.paused,
            drafter=checked.source if drafted else "", predicted_tok_s=choice.predicted_tok_s,
        )

    def verify(self, draft: Draft, logits: torch.Tensor, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The acceptance rule of the eager runner (specdec.core.runners.eager calls it):
        (n_accepted, next_token) as device tensors. logits, probs: (K+1, V). A subclass may look on
        without changing the step (specdec.core.detail records what the step panel shows); a plain
        run pays one method call for that. The static runner applies its own rule on the device."""
        if self.config.greedy:
            return greedy_accept(draft.ids, logits)
        return speculative_sample(draft.ids, probs, draft.q, self.generator)


def drafter_at(seq: list[int], config: GenerationConfig, lookup: LookupDrafter | None) -> str:
    """Who will draft this step (the cost policy prices the two apart): prompt lookup where it has
    a match (whether it has one does not depend on K), else the draft model."""
    if config.drafter == "lookup" or (lookup is not None and lookup.propose_ids(seq, 1)):
        return "lookup"
    return "model"
