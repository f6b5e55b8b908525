"""What one speculative step decided and why: the step panel's data.

A normal run records none of this. A run built detailed (specdec.core.runners.recording's
RecordingRunner) records, per step: the top tokens of the target's distribution p and the draft's
q at every scored position, the target's top-2 logit margin there, the uniform draws u of the
sampling rule, and at the position where the target added its own token, p, q and the residual
normalise(max(0, p - q)) over the tokens that matter. It changes nothing about the step: the
draws u are replayed on a copy of the generator's state, so the run yields exactly the events of
an unrecorded run with the same seed.

`explain(event, detail)` turns an event (and its detail, when recorded) into verdicts per drafted
token; without a detail it explains what the event alone says.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.core.acceptance import one_hot, residual
from specdec.core.events import EOS_ACCEPTED, OUR_ENGINE, StepEvent

TOP_N = 8  # tokens kept per distribution: enough to see where the mass is


@dataclass(frozen=True)
class Token:
    id: int
    text: str  # the token decoded on its own (may show a replacement character for a partial byte)
    prob: float


@dataclass(frozen=True)
class Position:
    """One of the K+1 positions the target's pass scored (position i follows draft token i-1)."""

    target_top: tuple[Token, ...]  # the TOP_N most likely tokens under p, best first
    draft_top: tuple[Token, ...] | None  # the same under q; None where nothing was drafted or q is one-hot (prompt lookup)
    margin: float  # the target's top-1 minus top-2 logit: how clear its choice was

    @property
    def choice(self) -> Token:
        """The target's most likely token here (the greedy rule keeps a draft only if it equals this)."""
        return self.target_top[0]


@dataclass(frozen=True)
class Candidate:
    """A token at the decisive position, under the three distributions."""

    id: int
    text: str
    p: float  # target
    q: float  # draft (0 where nothing was drafted at this position)
    residual: float | None  # normalise(max(0, p - q)); None under the greedy rule (it takes the argmax of p)


@dataclass(frozen=True)
class StepDetail:
    step: int
    greedy: bool
    positions: tuple[Position, ...]  # (K+1,)
    u: tuple[float, ...] | None  # (K,) the sampling rule's uniform draws; None when greedy
    at: int  # position where the target drew its own token (= drafts kept by the rule)
    candidates: tuple[Candidate, ...]  # at `at`: the top tokens of p, q and the residual, the draft token and the drawn one
    drawn: int  # the token the target added (correction or bonus)


def replay_uniforms(state: torch.Tensor, k: int, device) -> list[float]:
    """The K uniform draws speculative_sample makes first, replayed from a copy of the generator's
    state taken just before it ran (the run's own generator is not touched)."""
    replay = torch.Generator(device=device)
    replay.set_state(state)
    return torch.rand(k, generator=replay, device=device).tolist()


@dataclass(frozen=True)
class Scored:
    """What the acceptance rule decided from, as tensors."""

    draft_ids: torch.Tensor  # (K,)
    q: torch.Tensor | None  # (K, V) of the drafter; None: prompt lookup (one-hot)
    logits: torch.Tensor  # (K+1, V) of the target
    probs: torch.Tensor  # (K+1, V) of the target, processed as the run samples


@dataclass(frozen=True)
class Decided:
    """What the rule decided."""

    step: int
    at: int  # drafts kept
    drawn: int  # the target's own token
    u: list[float] | None  # (K,) the sampling rule's uniform draws; None when greedy
    greedy: bool


def record_step(scored: Scored, decided: Decided, top_n: int = TOP_N, decode=str) -> StepDetail:
    """What a step decided (`decided`) and from what (`scored`): the top tokens of p and q at each
    position, the margins, and p, q and the residual at the decisive one. decode: token id -> text."""
    draft_ids, q, logits, probs = scored.draft_ids, scored.q, scored.logits, scored.probs
    at, drawn, greedy = decided.at, decided.drawn, decided.greedy
    n = min(top_n, probs.shape[-1])
    k = draft_ids.shape[0]
    p_top = probs.topk(n, dim=-1)  # values, indices: (K+1, n)
    q_top = q.topk(n, dim=-1) if q is not None else None  # (K, n)
    top2 = logits.float().topk(min(2, logits.shape[-1]), dim=-1).values  # (K+1, 2)
    margins = (top2[:, 0] - top2[:, -1]).tolist()

    def tokens(values, ids) -> tuple[Token, ...]:
        return tuple(Token(i, decode(i), v) for v, i in zip(values.tolist(), ids.tolist()))

    positions = tuple(
        Position(
            target_top=tokens(p_top.values[i], p_top.indices[i]),
            draft_top=tokens(q_top.values[i], q_top.indices[i]) if q_top is not None and i < k else None,
            margin=margins[i],
        )
        for i in range(k + 1)
    )
    # The decisive position: p, q and (sampling) the residual the target drew from, computed by
    # the same function speculative_sample uses.
    q_all = q if q is not None else one_hot(draft_ids, probs.shape[-1], probs)  # (K, V)
    q_at = q_all[at] if at < k else torch.zeros_like(probs[at])  # (V,): nothing drafted after the last draft
    r_at = None if greedy else residual(probs[at], q_at)  # (V,)
    ids = set(p_top.indices[at].tolist()) | {drawn}
    if at < k:
        ids |= set(q_at.topk(n).indices.tolist()) | {int(draft_ids[at])}
    if r_at is not None:
        ids |= set(r_at.topk(n).indices.tolist())
    ids = sorted(ids)
    index = torch.tensor(ids, device=probs.device)
    p_vals, q_vals = probs[at, index].tolist(), q_at[index].tolist()
    r_vals = r_at[index].tolist() if r_at is not None else [None] * len(ids)
    candidates = sorted(
        (Candidate(i, decode(i), p, qv, r) for i, p, qv, r in zip(ids, p_vals, q_vals, r_vals)),
        key=lambda c: -max(c.p, c.q, c.residual or 0.0),
    )
    u = None if decided.u is None else tuple(decided.u)
    return StepDetail(decided.step, greedy, positions, u, at, tuple(candidates), drawn)


# --- explanation ----------------------------------------------------------------------------------

ACCEPTED, REJECTED, DISCARDED = "accepted", "rejected", "discarded"


@dataclass(frozen=True)
class DraftVerdict:
    """One drafted token: the numbers that decided it and the verdict."""

    index: int
    id: int  # the drafted token id
    text: str
    p_draft: float | None  # None: the engine does not report it
    p_target: float | None
    accept_prob: float | None  # min(1, p_target / p_draft): the chance the sampling rule keeps it
    verdict: str  # accepted, rejected (the first one the target turned down), discarded (drafted after that one)
    target_choice: str | None  # greedy: the target's top token here (known for every checked position)
    margin: float | None  # greedy: the target's top-1 minus top-2 logit here
    u: float | None  # sampling: the uniform draw compared with accept_prob (recorded only with a detail)


@dataclass(frozen=True)
class StepExplanation:
    step: int
    greedy: bool
    drafter: str  # "model", "lookup" or "" (nothing drafted)
    rows: tuple[DraftVerdict, ...]
    kind: str  # kind of the step's last token (correction, bonus, plain, eos)
    token_text: str | None  # the target's own token (None for an "eos" step, which has none)
    token_margin: float | None
    detail: StepDetail | None  # None: the run was not recorded (Generate); distributions and u are unknown
    engine: str = OUR_ENGINE  # who produced the step (StepEvent.engine)
    unseen_rejected: int = 0  # rejected drafts the engine counted but did not name (no row of their own)
    paused_why: str = ""  # the cost K policy chose a plain step: why drafting would not pay here (c, alpha)
    withdrawn_why: str = ""  # the drafter left out an unsure draft (StepEvent.withdrawn_why)

    @property
    def accepted(self) -> int:
        return sum(r.verdict == ACCEPTED for r in self.rows)


def explain(event: StepEvent, detail: StepDetail | None = None) -> StepExplanation:
    if detail is not None and detail.step != event.step:
        raise ValueError(f"detail of step {detail.step} given for step {event.step}")
    n = event.accepted
    rows = []
    for i, token in enumerate(event.drafted):
        verdict = ACCEPTED if i < n else REJECTED if i == n else DISCARDED
        choice = margin = u = None
        if event.greedy and i <= n:
            # The target's choice where it checked: the draft itself while they agree, else its correction.
            margin = event.margins[i] if event.margins is not None and i < len(event.margins) else None
            if detail is not None:
                choice, margin = detail.positions[i].choice.text, detail.positions[i].margin
            else:
                choice = event.drafted_text[i] if i < n else event.emitted_text[-1]
        if detail is not None and detail.u is not None:
            u = detail.u[i]
        known = event.p_target is not None and event.p_draft is not None
        rows.append(DraftVerdict(i, token, event.drafted_text[i], event.p_draft[i] if known else None,
                                 event.p_target[i] if known else None, event.accept_probs[i] if known else None,
                                 verdict, choice, margin, u))
    has_token = event.kind != EOS_ACCEPTED
    return StepExplanation(
        step=event.step, greedy=event.greedy, drafter=event.drafter, rows=tuple(rows), kind=event.kind,
        token_text=event.emitted_text[-1] if has_token else None,
        token_margin=event.margins[-1] if has_token and event.margins is not None else None, detail=detail,
        engine=event.engine, unseen_rejected=event.unseen_rejected, paused_why=event.paused_why,
        withdrawn_why=event.withdrawn_why,
    )
