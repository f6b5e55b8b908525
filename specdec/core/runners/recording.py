"""A Runner that records what each step decided, for the step panel (specdec.core.detail).

A normal run records none of this. This runner makes the same steps and the same events (the
sampling rule's draws u are replayed on a copy of the generator's state, never on the run's own);
it keeps each step's tensors, and turns them into a StepDetail when `details` is read: the page
reads it between events, in the time the run's clock leaves out, so the run's timing is a normal one.
(specdec.engines.assemble.build_decoding(..., detailed=True) builds such a run.)
"""

from __future__ import annotations

from specdec.core.detail import TOP_N, Decided, Scored, StepDetail, record_step, replay_uniforms
from specdec.core.runners.runner import Runner


class RecordingRunner(Runner):
    def __init__(self, parts, config, generator, proposers, top_n: int = TOP_N):
        super().__init__(parts, config, generator, proposers)
        self.tokenizer, self.top_n = parts.tokenizer, top_n
        self._details: list[StepDetail] = []
        self._pending = None  # the last check's tensors, recorded when `details` is next read

    def accept(self, draft, logits, probs):
        # The sampling rule draws u first, from the run's generator: copy its state to replay them.
        state = None if self.config.greedy else self.generator.get_state()
        accepted, token = super().accept(draft, logits, probs)
        self._pending = (draft, logits, probs, accepted, token, state)
        return accepted, token

    def check(self, seq, proposer, k):
        self._record_pending()  # a step nobody looked at: recorded before its tensors go
        return super().check(seq, proposer, k)

    @property
    def details(self) -> list[StepDetail]:
        """One StepDetail per step so far (index = step)."""
        self._record_pending()
        return self._details

    def _record_pending(self) -> None:
        if self._pending is None:
            return
        draft, logits, probs, accepted, token, state = self._pending
        self._pending = None
        u = None if state is None else replay_uniforms(state, draft.ids.shape[0], probs.device)
        decided = Decided(len(self._details), int(accepted), int(token), u, self.config.greedy)
        scored = Scored(draft.ids, draft.q, logits, probs)
        self._details.append(record_step(scored, decided, self.top_n, decode=lambda i: self.tokenizer.decode([i])))
