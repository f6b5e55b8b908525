"""The event contract: one immutable StepEvent per target forward pass.

Everything downstream (CLI, metrics, renderers, charts) reads only these events.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kind of the last emitted token of a step.
CORRECTION = "correction"  # the target resampled after rejecting a draft token
BONUS = "bonus"  # every draft token was accepted; the target adds one of its own
PLAIN = "plain"  # nothing was drafted this step (plain decoding, or lookup found no match)
EOS_ACCEPTED = "eos"  # an accepted draft token ended the run; no target token follows
KINDS = (CORRECTION, BONUS, PLAIN, EOS_ACCEPTED)

# Why a run ended.
FINISH_EOS = "eos"
FINISH_LENGTH = "length"
FINISH_STOPPED = "stopped"


@dataclass(frozen=True)
class StepEvent:
    step: int  # 0-based index of the target forward pass
    drafted: tuple[int, ...]  # token ids proposed by the drafter (empty for plain steps)
    accepted: int  # how many of `drafted` the target kept (a prefix)
    emitted: tuple[int, ...]  # drafted[:accepted] + one target token (only drafted[:accepted] when kind == "eos")
    kind: str  # kind of the last emitted token: one of KINDS
    p_target: tuple[float, ...]  # target probability of each drafted token (softmax at T=1 when greedy)
    p_draft: tuple[float, ...]  # draft probability of each drafted token (1.0 for prompt lookup)
    draft_s: float  # seconds spent drafting this step
    verify_s: float  # seconds spent in the target pass (and acceptance) this step
    total_tokens: int  # new tokens emitted so far, this step included
    elapsed_s: float  # engine seconds since generation started (after the prompt was processed; time the consumer holds the run between events is not counted)
    emitted_text: tuple[str, ...]  # display text of each emitted token, from decoding the whole sequence
    drafted_text: tuple[str, ...]  # display text of each drafted token, in the context where it was proposed
    margins: tuple[float, ...]  # target's top-1 minus top-2 logit at each emitted position
    k: int = 0  # draft length asked for this step (0 for plain decoding)
    greedy: bool = True  # greedy rule (keep drafts equal to the target's argmax), else rejection sampling
    finish: str | None = None  # set on the last event when the run ends by "eos" or "length" (a stop ends it between events)
    paused: bool = False  # K = 0 chosen by the cost K policy: drafting would not pay at the measured costs and the acceptance so far
    drafter: str = ""  # who drafted this step: "model" (a draft-model pass per token), "lookup" (no model pass), "" (nothing drafted)
    predicted_tok_s: float | None = None  # tokens/s the cost K policy predicted for this step at its K (None: another policy)

    @property
    def rejected(self) -> tuple[int, ...]:
        """Draft tokens the target turned down (shown struck through, never part of the output)."""
        return self.drafted[self.accepted :]

    @property
    def accept_probs(self) -> tuple[float, ...]:
        """min(1, p_target / p_draft) for each drafted token: the chance the sampling rule keeps it."""
        return tuple(min(1.0, pt / pd) if pd > 0 else 0.0 for pt, pd in zip(self.p_target, self.p_draft))


def check_invariants(events: list[StepEvent]) -> None:
    """Raise AssertionError if a stream of events breaks the contract (used by tests on every run)."""
    total = 0
    for i, e in enumerate(events):
        assert e.step == i, f"step {e.step} at position {i}"
        assert 0 <= e.accepted <= len(e.drafted), f"step {i}: accepted {e.accepted} of {len(e.drafted)}"
        assert e.kind in KINDS, f"step {i}: unknown kind {e.kind!r}"
        head = e.drafted[: e.accepted]
        if e.kind == EOS_ACCEPTED:
            assert e.emitted == head and e.accepted >= 1, f"step {i}: eos step emits drafted[:accepted]"
        else:
            assert e.emitted[:-1] == head and len(e.emitted) == e.accepted + 1, f"step {i}: emitted != accepted + 1"
        if e.kind == BONUS:
            assert e.accepted == len(e.drafted) > 0, f"step {i}: bonus needs every draft accepted"
        if e.kind == CORRECTION:
            assert e.accepted < len(e.drafted), f"step {i}: correction needs a rejection"
        if e.kind == PLAIN:
            assert not e.drafted, f"step {i}: plain step with drafts"
        assert len(e.p_target) == len(e.p_draft) == len(e.drafted) == len(e.drafted_text)
        assert len(e.emitted_text) == len(e.emitted) == len(e.margins)
        total += len(e.emitted)
        assert e.total_tokens == total, f"step {i}: total {e.total_tokens} != {total}"
        assert e.finish is None or i == len(events) - 1, f"step {i}: finish set before the last event"
