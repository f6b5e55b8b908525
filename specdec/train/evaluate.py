"""The head judged on held-out sequences: top-1 agreement and acceptance by draft position 1..K.

The head drafts from every position of a validation sequence at once (specdec/train/unroll.py, the
same arithmetic as drafting: tests/test_head.py), and its top-1 token at each draft position is
compared with the target's greedy token there (specdec/train/objective.py says what counts as tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specdec.core.head import HeadWeights
from specdec.train.data import Sequence
from specdec.train.objective import PositionCounts, empty_counts, position_counts
from specdec.train.unroll import unroll


@dataclass
class Judge:
    """What evaluating needs from the target, computed once: its embedding, the truncated vocabulary's
    lm_head rows and ids, and its greedy token at every position of every validation sequence."""

    embed: object  # token ids (n,) -> (n, H)
    rows: torch.Tensor  # (N, H) the lm_head rows of the truncated vocabulary
    ids: torch.Tensor  # (N,) their token ids
    greedy: list[torch.Tensor]  # per sequence (n,): argmax of the target's full logits at each position

    @classmethod
    @torch.no_grad()
    def of(cls, sequences: list[Sequence], embed, lm_head, rows, ids, chunk: int = 512) -> "Judge":
        greedy, dtype = [], next(lm_head.parameters()).dtype  # the target's own lm_head, in its own dtype
        for s in sequences:
            device = next(lm_head.parameters()).device
            parts = [lm_head(s.features[i : i + chunk].to(device, dtype)).argmax(-1) for i in range(0, len(s), chunk)]
            greedy.append(torch.cat(parts).cpu())
        return cls(embed, rows, ids, greedy)


@dataclass
class Verdict:
    counts: PositionCounts
    loss: float  # step-1 cross-entropy against the target's distribution (soft labels), per position

    def line(self) -> str:
        acc = " ".join(f"{a:.2f}" for a in self.counts.acceptance)
        return f"acceptance by position {acc}; mean accepted {self.counts.mean_accepted:.2f}; loss {self.loss:.3f}"


@torch.no_grad()
def judge(head: HeadWeights, sequences: list[Sequence], judge_with: Judge, depth: int) -> Verdict:
    """Acceptance by position 1..depth over the drafts of answer tokens (every token, for read text)."""
    counts, loss_sum, loss_n = empty_counts(depth), 0.0, 0
    dt, device = head.dtype, head.norm.weight.device
    rows, ids = judge_with.rows.to(device, dt), judge_with.ids.to(device)
    for s, greedy in zip(sequences, judge_with.greedy):
        feats = s.features.to(device, dt)  # (n, H)
        steps = unroll(head, feats[None], judge_with.embed(s.ids.to(device)).to(dt)[None], depth)
        steps = [x[0].float().cpu() for x in steps]  # (n-1, H) each
        n = len(s)
        first = max(0, s.answer_from - 1)  # the first start whose first draft is an answer token
        starts = torch.arange(first, n - 1)  # (S,)
        if starts.numel() == 0:
            continue
        draft_top, target_top, followed, available = (torch.zeros(starts.numel(), depth, dtype=torch.long) for _ in range(4))
        for k in range(1, depth + 1):
            at = (starts + k).clamp(max=n - 1)  # the feature the k-th draft stands for
            logits = steps[k - 1][starts].to(device, dt) @ rows.T  # (S, N)
            draft_top[:, k - 1] = ids[logits.argmax(-1)].cpu()
            target_top[:, k - 1] = greedy[at]
            available[:, k - 1] = (starts + k <= n - 1).long()
            nxt = (starts + k + 1).clamp(max=n - 1)
            followed[:, k - 1] = ((s.ids[nxt] == greedy[at]) & (starts + k + 1 <= n - 1)).long()
        counts = counts + position_counts(draft_top, target_top, followed.bool(), available.bool())
        target_logp = F.log_softmax((feats[1:] @ rows.T).float(), -1)  # (n-1, N)
        logq = F.log_softmax((steps[0].to(device, dt) @ rows.T).float(), -1)
        per = -(target_logp.exp() * logq).sum(-1)[first:]
        loss_sum, loss_n = loss_sum + float(per.sum()), loss_n + per.numel()
    return Verdict(counts, loss_sum / max(loss_n, 1))
