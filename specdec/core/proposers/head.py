"""The head: a layer trained on the target's own hidden states drafts K tokens (EAGLE style).

The head (specdec.core.head.HeadRun) reads pairs (f_t, token t+1): the target's feature at
position t (its last hidden state after its final norm) and the token that followed. Its own KV
cache holds one position per pair. The protocol (docs/head.md):

- start: after the target's prefill over prompt[:-1] (features f_0..f_{L-2}), extend the head
  with (f_0..f_{L-2}, tokens 1..L-1);
- propose: the head's prediction after the last real pair gives draft 1 through the target's
  lm_head; each further draft is one `step` on the head's own predicted feature and the token it
  drafted (K - 1 steps);
- settle: the check started at position b-1 (the last token, then the drafts) and kept n drafts
  plus the target's token, so the sequence is now b + n + 1 long: crop the head back to b-1
  positions (its drafted steps go) and keep the check's real features f_{b-1}..f_{b-1+n} for the
  tokens b..b+n (an accepted end-of-sequence token ends the run one short);
- catch up: the next `propose` extends the head with every pair kept since it last drafted, in
  one pass. A step the head does not draft (a plain step the cost policy chose, a lookup step)
  then costs it nothing: extending after each one cost a pass of the head's layer, about 3% of
  a decode step, on every plain step. One pass over m pairs costs about what one pair costs,
  since only the last pair's output goes through the layer's MLP.

The features come from the check the runner just made (`run.target.features`, every row of the
pass: both runners keep them), so the head costs the target nothing.

Unsure drafts are left out (greedy runs): the head proposes its drafts up to the first whose top
probability is under UNSURE_BELOW, and none when the first one is. Such a draft is rarely accepted
(2 of 68 on the held-out and bench prompts, greedy, the shipped head: docs/head.md), and checking
it costs a row of the target's pass and the head's later steps. The decision reads q before the
token is chosen, so the output is unchanged; it costs one read of the top probability per draft.
The step counts a left-out draft as drafted and turned down (specdec.core.decoding), so the cost
policy learns that drafting does not pay where the head is always unsure (a translation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from specdec.core.acceptance import race_sample
from specdec.core.head import HeadRun
from specdec.core.proposers.base import Draft, nothing
from specdec.core.sampling import probs_from_logits

UNSURE_BELOW = 0.1  # a greedy draft whose top probability is under this is left out (module docstring)


@dataclass(frozen=True)
class HeadSource:
    """What a run needs to draft with a head (built above the core: specdec.engines.assemble)."""

    make: Callable[[], HeadRun]  # a HeadRun with an empty cache of its own, one per run
    vocab_size: int  # the target's logits' width: the head's q rows are cut to it
    label: str = ""  # which head file, for the status line
    digest: str = ""  # the head file's tensors digest: what its measured step is keyed by (specdec.measure.cost_table)
    prior: float | None = None  # the acceptance the cost K policy starts from: the head file's own validation figure (None: the recorded one)
    unsure_below: float = UNSURE_BELOW  # greedy drafts under this top probability are left out (0: every draft is proposed)


class HeadProposer:
    name = "head"

    def __init__(self, source: HeadSource, config, generator: torch.Generator | None):
        self.source, self.config, self.generator = source, config, generator
        self.head: HeadRun | None = None
        self.predicted: torch.Tensor | None = None  # (1, H) the head's feature after the last real pair; None: none yet
        self.pending: list[torch.Tensor] = []  # (m_i, H) real features kept since the head last extended, oldest first
        self.pending_from = 0  # the sequence position of the first pending pair's token

    def has_draft(self, seq: list[int]) -> bool:
        return True

    def unseen(self, seq: list[int]) -> int:
        """1: its catch-up over the pairs of the steps it did not draft costs about what one pair
        costs (module docstring), so the cost policy prices its first draft alike after any pause."""
        return 1

    def start(self, run, prompt_length: int, positions: int) -> None:
        self.head, self.predicted, self.pending = self.source.make(), None, []
        if prompt_length > 1:  # a one-token prompt gives no feature: the first step drafts nothing
            self.predicted = self.head.extend(run.target.features[: prompt_length - 1], run.tokens[1:prompt_length])

    def ready(self, run) -> None:
        pass  # it read the prompt's features at the start: the target's prefill made them anyway

    def catch_up(self, run) -> None:
        """Extend the head with the pairs kept since it last drafted, in one pass."""
        if self.pending:
            features = torch.cat(self.pending)  # (m, H)
            end = self.pending_from + features.shape[0]
            self.predicted = self.head.extend(features, run.tokens[self.pending_from : end])
            self.pending = []

    def propose(self, run, seq: list[int], k: int) -> Draft:
        self.catch_up(run)
        if self.predicted is None:
            return nothing(run.device)
        cfg, feature = self.config, self.predicted
        floor = self.source.unsure_below if cfg.greedy else 0.0
        ids, qs, why = [], [], ""
        for i in range(k):
            logits = self.head.logits(feature)[:, : self.source.vocab_size]  # (1, V), -inf outside the head's vocabulary
            q = probs_from_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # (1, V)
            if floor > 0 and (top := q.max().item()) < floor:
                why = unsure_reason(i, top, floor)
                break
            token = logits.argmax(dim=-1) if cfg.greedy else race_sample(q, self.generator)  # (1,)
            ids.append(token)
            qs.append(q)
            if i < k - 1:
                feature = self.head.step(feature, token)  # (1, H) on its own prediction
        if not ids:
            return replace(nothing(run.device), withdrawn_why=why)
        return Draft(torch.cat(ids), torch.cat(qs), self.name, withdrawn_why=why)

    def settle(self, run, kept_from: int, accepted: int, length: int) -> None:
        """Drop the drafted steps and keep the check's real features of the positions kept, for the
        next draft to read (catch_up). The features are copied: the target's next pass reuses them."""
        self.head.crop(kept_from - 1)  # a no-op after a step the head did not draft
        kept = length - kept_from  # pairs (f_{b-1+i}, token b+i) for i < kept
        if kept > 0:
            if not self.pending:
                self.pending_from = kept_from
            self.pending.append(run.target.features[:kept].clone())

    def close(self, run) -> None:
        self.head = self.predicted = None
        self.pending = []


def unsure_reason(position: int, top: float, floor: float) -> str:
    """Why the head left out its draft at `position` (0-based), for the step's event."""
    which = "its first draft" if position == 0 else f"draft {position + 1}"
    return (f"the head was unsure of {which} (top probability {top:.2f}, under {floor:.2f}): "
            "a draft that unsure is rarely accepted, and checking it costs a row of the target's pass")
