"""The event contract: one immutable StepEvent per target forward pass.

Everything downstream (CLI, metrics, renderers, charts) reads only these events. Our engine fills
every field; a real engine read over HTTP (specdec.engines) fills what it reports and leaves the
rest None, never invented: llama.cpp and vLLM say how many tokens they drafted, not which, so a
remote event names its accepted drafts and counts the rest in `unseen_rejected`.
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


OUR_ENGINE = "specdec"  # StepEvent.engine of this project's own runs; the real engines' names are in specdec.engines.base


@dataclass(frozen=True)
class StepEvent:
    step: int  # 0-based index of the target forward pass
    drafted: tuple[int, ...]  # token ids proposed by the drafter that are known (empty for plain steps; a remote engine: the accepted ones only)
    accepted: int  # how many drafts the target kept (a prefix of `drafted`)
    emitted: tuple[int, ...]  # drafted[:accepted] + one target token (only drafted[:accepted] when kind == "eos")
    kind: str  # kind of the last emitted token: one of KINDS
    p_target: tuple[float, ...] | None  # target probability of each drafted token (softmax at T=1 when greedy); None: not reported
    p_draft: tuple[float, ...] | None  # draft probability of each drafted token (1.0 for prompt lookup); None: not reported
    draft_s: float | None  # seconds spent drafting this step; None: not reported apart
    verify_s: float | None  # seconds spent in the target pass (and acceptance) this step; None: not reported apart
    total_tokens: int  # new tokens emitted so far, this step included
    elapsed_s: float  # ours: engine seconds since generation started (after the prompt was processed; time the consumer holds the run between events is not counted); a remote engine: the client's clock when the step arrived, from the request's start (prompt included)
    emitted_text: tuple[str, ...]  # display text of each emitted token, from decoding the whole sequence
    drafted_text: tuple[str, ...]  # display text of each drafted token, in the context where it was proposed
    margins: tuple[float, ...] | None  # target's top-1 minus top-2 logit at each emitted position; None: not reported
    k: int = 0  # draft length asked for this step (0 for plain decoding)
    greedy: bool = True  # greedy rule (keep drafts equal to the target's argmax), else rejection sampling
    finish: str | None = None  # set on the last event when the run ends by "eos" or "length" (a stop ends it between events)
    paused: bool = False  # K = 0 chosen by the cost K policy: drafting would not pay at the measured costs and the acceptance so far
    drafter: str = ""  # who drafted this step: "model" (a draft-model pass per token), "lookup" (no model pass), "" (nothing drafted)
    engine: str = OUR_ENGINE  # who produced the event: this project's engine, or a real one (specdec.engines.base.ENGINES)
    unseen_rejected: int = 0  # rejected draft tokens the engine counted but did not name (not in `drafted`)
    predicted_tok_s: float | None = None  # tokens/s the cost K policy predicted for this step at its K (None: another policy)
    paused_why: str = ""  # on a paused step: why drafting would not pay, with this machine's c and the acceptance so far
    withdrawn_why: str = ""  # the drafter left out an unsure draft after `drafted` (all of it when nothing was drafted): why

    @property
    def n_drafted(self) -> int:
        """How many tokens were drafted this step, named or not."""
        return len(self.drafted) + self.unseen_rejected

    @property
    def n_rejected(self) -> int:
        """How many drafts the target turned down, named or not."""
        return self.n_drafted - self.accepted

    @property
    def rejected(self) -> tuple[int, ...]:
        """Draft tokens the target turned down that the engine named (shown struck through, never part
        of the output); n_rejected counts them all."""
        return self.drafted[self.accepted :]

    @property
    def accept_probs(self) -> tuple[float, ...] | None:
        """min(1, p_target / p_draft) for each drafted token: the chance the sampling rule keeps it
        (None where the engine does not report p and q)."""
        if self.p_target is None or self.p_draft is None:
            return None
        return tuple(min(1.0, pt / pd) if pd > 0 else 0.0 for pt, pd in zip(self.p_target, self.p_draft))


def check_invariants(events: list[StepEvent]) -> None:
    """Raise AssertionError if a stream of events breaks the contract (used by tests on every run)."""
    total = 0
    for i, e in enumerate(events):
        assert e.step == i, f"step {e.step} at position {i}"
        n = e.n_drafted
        assert e.unseen_rejected >= 0, f"step {i}: unseen_rejected {e.unseen_rejected}"
        assert 0 <= e.accepted <= len(e.drafted) <= n, f"step {i}: accepted {e.accepted} of {len(e.drafted)} named, {n} drafted"
        assert e.kind in KINDS, f"step {i}: unknown kind {e.kind!r}"
        head = e.drafted[: e.accepted]
        if e.kind == EOS_ACCEPTED:
            assert e.emitted == head and e.accepted >= 1, f"step {i}: eos step emits drafted[:accepted]"
        else:
            assert e.emitted[:-1] == head and len(e.emitted) == e.accepted + 1, f"step {i}: emitted != accepted + 1"
        if e.kind == BONUS:
            assert e.accepted == n > 0, f"step {i}: bonus needs every draft accepted"
        if e.kind == CORRECTION:
            assert e.accepted < n, f"step {i}: correction needs a rejection"
        if e.kind == PLAIN:
            assert n == 0, f"step {i}: plain step with drafts"
        assert len(e.drafted_text) == len(e.drafted), f"step {i}: {len(e.drafted_text)} draft texts for {len(e.drafted)} drafts"
        for name in ("p_target", "p_draft"):
            assert getattr(e, name) is None or len(getattr(e, name)) == len(e.drafted), f"step {i}: {name} length"
        assert len(e.emitted_text) == len(e.emitted), f"step {i}: {len(e.emitted_text)} texts for {len(e.emitted)} tokens"
        assert e.margins is None or len(e.margins) == len(e.emitted), f"step {i}: margins length"
        total += len(e.emitted)
        assert e.total_tokens == total, f"step {i}: total {e.total_tokens} != {total}"
        assert e.finish is None or i == len(events) - 1, f"step {i}: finish set before the last event"
