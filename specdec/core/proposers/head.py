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
  positions (its drafted steps go) and extend it with the check's real features
  f_{b-1}..f_{b-1+n} and the tokens b..b+n (an accepted end-of-sequence token ends the run one short).

The features come from the check the runner just made (`run.target.features`, every row of the
pass: both runners keep them), so the head costs the target nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specdec.core.acceptance import race_sample
from specdec.core.head import HeadRun
from specdec.core.proposers.base import Draft, nothing
from specdec.core.sampling import probs_from_logits


@dataclass(frozen=True)
class HeadSource:
    """What a run needs to draft with a head (built above the core: specdec.engines.assemble)."""

    make: Callable[[], HeadRun]  # a HeadRun with an empty cache of its own, one per run
    vocab_size: int  # the target's logits' width: the head's q rows are cut to it
    label: str = ""  # which head file, for the status line
    digest: str = ""  # the head file's tensors digest: what its measured step is keyed by (specdec.measure.cost_table)
    prior: float | None = None  # the acceptance the cost K policy starts from: the head file's own validation figure (None: the recorded one)


class HeadProposer:
    name = "head"

    def __init__(self, source: HeadSource, config, generator: torch.Generator | None):
        self.source, self.config, self.generator = source, config, generator
        self.head: HeadRun | None = None
        self.predicted: torch.Tensor | None = None  # (1, H) the head's feature after the last real pair; None: none yet

    def has_draft(self, seq: list[int]) -> bool:
        return True

    def start(self, run, prompt_length: int, positions: int) -> None:
        self.head, self.predicted = self.source.make(), None
        if prompt_length > 1:  # a one-token prompt gives no feature: the first step drafts nothing
            self.predicted = self.head.extend(run.target.features[: prompt_length - 1], run.tokens[1:prompt_length])

    def propose(self, run, seq: list[int], k: int) -> Draft:
        if self.predicted is None:
            return nothing(run.device)
        cfg, feature = self.config, self.predicted
        ids, qs = [], []
        for i in range(k):
            logits = self.head.logits(feature)[:, : self.source.vocab_size]  # (1, V), -inf outside the head's vocabulary
            q = probs_from_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # (1, V)
            token = logits.argmax(dim=-1) if cfg.greedy else race_sample(q, self.generator)  # (1,)
            ids.append(token)
            qs.append(q)
            if i < k - 1:
                feature = self.head.step(feature, token)  # (1, H) on its own prediction
        return Draft(torch.cat(ids), torch.cat(qs), self.name)

    def settle(self, run, kept_from: int, accepted: int, length: int) -> None:
        """Drop the drafted steps and read the check's real features of the positions kept."""
        self.head.crop(kept_from - 1)
        kept = length - kept_from  # pairs (f_{b-1+i}, token b+i) for i < kept
        if kept > 0:
            self.predicted = self.head.extend(run.target.features[:kept], run.tokens[kept_from:length])

    def close(self, run) -> None:
        self.head = self.predicted = None
