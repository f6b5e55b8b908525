"""The head judged on held-out sequences: top-1 agreement and acceptance by draft position 1..K.

The head drafts from every position of a validation sequence at once (specdec/train/unroll.py, the
same arithmetic as drafting: tests/test_head.py), and its top-1 token at each draft position, over
the tokens it drafts from, is compared with the target's greedy token there (the first of the
sequence's stored top tokens; specdec/train/objective.py says what counts as tested).

Two counts come of it. From every start: each position of the text is a start, as training sees
it. As a run drafts (`walk`): a step drafts K tokens from where the last one ended, the target
keeps the leading matches and adds its own token, and the next step starts after them; so the
starts are those a drafting run would have, and the figures are the bench's
(specdec.measure.positions, counted by the same function).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specdec.core.config import GenerationConfig
from specdec.core.head import HeadWeights
from specdec.measure.positions import PositionAcceptance, steps_counted
from specdec.train.data import Sequence
from specdec.train.objective import PositionCounts, batch_vocabulary, empty_counts, position_counts, soft_labels
from specdec.train.unroll import unroll


@dataclass
class Judge:
    """What judging needs from the target: its embedding and lm_head rows, and the tokens the head drafts from."""

    embed: object  # token ids (n,) -> (n, H)
    lm_weight: torch.Tensor  # (V, H) the target's lm_head
    ids: torch.Tensor  # (N,) the tokens the head drafts from (sorted)

    def __post_init__(self):
        self.rows = self.lm_weight[self.ids.to(self.lm_weight.device)]  # (N, H): their lm_head rows, taken once


WALK_K = GenerationConfig().k  # draft length of the walk: the bench's `head` mode's default K


@dataclass
class Verdict:
    counts: PositionCounts  # from every start
    loss: float  # step-1 cross-entropy against the target's distribution (soft labels), per position
    walks: list[list[tuple[int, int]]]  # per sequence judged, in order: (drafted, accepted) of each step of the walk
    walk_k: int = WALK_K  # the walk's draft length (at most the depth judged)

    def walked(self, which: list[int] | None = None) -> PositionAcceptance:
        """The walk's figures over all sequences, or those at the indices `which`."""
        picked = self.walks if which is None else [self.walks[i] for i in which]
        return steps_counted((step for w in picked for step in w), "head")


def walk(agree: torch.Tensor, followed: torch.Tensor, available: torch.Tensor, k: int = WALK_K) -> list[tuple[int, int]]:
    """Drafting replayed over one sequence. agree, followed, available (S, depth) per start and
    draft position, as position_counts reads them. From start 0, each step drafts the positions
    1..k that are judged (inside the text, and reached with the text going on as the target's
    greedy output would), keeps the leading run that agrees, and the next step starts after the
    kept drafts and the target's own token. -> (drafted, accepted) per step."""
    k = min(k, agree.shape[1])
    ok = (agree & followed)[:, :k]
    chain = torch.cat([torch.ones_like(ok[:, :1]), ok[:, :-1].cumprod(dim=1).bool()], dim=1)  # (S, k)
    tested = (chain & available[:, :k]).sum(1).tolist()
    kept = (chain & available[:, :k] & agree[:, :k]).sum(1).tolist()
    steps, start = [], 0
    while start < len(tested):
        steps.append((tested[start], kept[start]))
        start += kept[start] + 1
    return steps


def draft_tokens(judge_with: Judge, rows: torch.Tensor, predicted: torch.Tensor) -> torch.Tensor:
    """predicted (S, H), rows (N, H) -> (S,) the head's top-1 token among those it drafts from."""
    return judge_with.ids[(predicted.to(rows.device, rows.dtype) @ rows.T).argmax(-1).cpu()]


@torch.no_grad()
def judge(head: HeadWeights, sequences: list[Sequence], judge_with: Judge, depth: int, fusion=None) -> Verdict:
    """Acceptance by position 1..depth over the drafts of answer tokens (every token, for read text).
    fusion: EAGLE-3's fused input (specdec/train/fusion.py) where the head was trained with it."""
    counts, loss_sum, loss_n, walks = empty_counts(depth), 0.0, 0, []
    dt, device = head.dtype, head.norm.weight.device
    subset_rows = judge_with.rows.to(dt)
    for s in sequences:
        feats = s.features.to(device, dt)  # (n, H)
        read = fusion(feats, s.layers.to(device, dt))[None] if fusion is not None else None
        steps = unroll(head, feats[None], judge_with.embed(s.ids.to(device)).to(dt)[None], depth, read)
        steps = [x[0] for x in steps]  # (n-1, H) each
        n, greedy = len(s), s.top_ids[:, 0]
        first = max(0, s.answer_from - 1)  # the first start whose first draft is an answer token
        starts = torch.arange(first, n - 1)  # (S,)
        if starts.numel() == 0:
            walks.append([])
            continue
        draft_top, target_top, followed, available = (torch.zeros(starts.numel(), depth, dtype=torch.long) for _ in range(4))
        for k in range(1, depth + 1):
            at = (starts + k).clamp(max=n - 1)  # the feature the k-th draft stands for
            draft_top[:, k - 1] = draft_tokens(judge_with, subset_rows, steps[k - 1][starts])
            target_top[:, k - 1] = greedy[at]
            available[:, k - 1] = (starts + k <= n - 1).long()
            nxt = (starts + k + 1).clamp(max=n - 1)
            followed[:, k - 1] = ((s.ids[nxt] == greedy[at]) & (starts + k + 1 <= n - 1)).long()
        agree = (draft_top == target_top) & available.bool()
        counts = counts + position_counts(draft_top, target_top, followed.bool(), available.bool())
        walks.append(walk(agree, followed.bool(), available.bool()))
        vocab = batch_vocabulary(s.top_ids[1:], torch.ones(n - 1, dtype=torch.bool))
        labels = soft_labels(s.top_ids[1:], s.top_logp[1:], vocab)[first:]  # (S, M): the target at t+1
        rows = judge_with.lm_weight[vocab.to(judge_with.lm_weight.device)].to(dt)
        logq = F.log_softmax((steps[0][first:].to(rows.device) @ rows.T).float(), dim=-1).cpu()
        per = -(labels * logq).sum(-1)
        loss_sum, loss_n = loss_sum + float(per.sum()), loss_n + per.numel()
    return Verdict(counts, loss_sum / max(loss_n, 1), walks, min(WALK_K, depth))
