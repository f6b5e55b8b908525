"""What the head is trained on and judged by: the target's own distribution, and top-1 agreement by draft position.

Loss (EAGLE's, with EAGLE-3's training-time test): for every position t and draft step s,
cross-entropy of the head's distribution against the target's (soft labels: the target's own
probabilities of its top tokens at t+s, over the tokens the batch's labels name), plus a feature
regression (smooth L1 from the head's prediction to the target's feature f_{t+s}); step s weighted
by decay**(s-1), as later steps matter less (each is reached only after the ones before it).

Judged by what drafting would do: at draft position k, the head's top-1 token against the target's
greedy token (over the whole vocabulary). Position k is *tested* only where positions 1..k-1 were
accepted and the text went on as the target would have (on its own greedy answers it always
does); acceptance by position is accepted / tested, the definition of vLLM's per-request metrics
and llama.cpp's stats.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def batch_vocabulary(top_ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(M,) sorted: every token among the target's top tokens at the batch's real positions. The
    cross-entropy is taken over these (thousands, not the vocabulary's 151936 or the subset's 32768):
    the tokens the target itself considers, which is where the head's top-1 is decided."""
    return torch.unique(top_ids[valid])


def soft_labels(top_ids: torch.Tensor, top_logp: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
    """top_ids, top_logp (..., TOP) -> (..., M): the target's probabilities over `vocab`, its top
    tokens renormalised to sum to 1."""
    where = torch.searchsorted(vocab, top_ids)  # (..., TOP)
    probs = torch.softmax(top_logp.float(), dim=-1)
    return torch.zeros(*top_ids.shape[:-1], vocab.numel(), device=probs.device).scatter_add_(-1, where, probs)


def step_losses(predicted: torch.Tensor, features: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor,
                valid: torch.Tensor, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft step s. predicted (B, T-1, H): the head's prediction from t, standing for f_{t+s};
    features (B, T, H); labels (B, T, M): the target's next-token distribution at each position
    over the batch vocabulary; rows (M, H): the target's lm_head rows of those tokens; valid (B, T).
    -> (cross-entropy, regression), each a mean over the positions where t+s is real."""
    length = predicted.shape[1]
    reach = min(length, features.shape[1] - s)  # t + s <= T - 1
    where = valid[:, s : s + reach]  # (B, reach)
    pred = predicted[:, :reach][where]  # (n, H)
    logq = F.log_softmax((pred @ rows.T).float(), dim=-1)  # (n, M)
    cross = -(labels[:, s : s + reach][where] * logq).sum(-1).mean()
    regression = F.smooth_l1_loss(pred.float(), features[:, s : s + reach][where].float())
    return cross, regression


@dataclass
class PositionCounts:
    """Counts by draft position 1..K over a set of starting positions."""

    accepted: torch.Tensor  # (K,) drafts accepted at position k (1..k-1 accepted before it)
    tested: torch.Tensor  # (K,) starts where position k was tested
    agree: torch.Tensor  # (K,) top-1 agreement at position k, wherever it could be measured
    measured: torch.Tensor  # (K,)

    def __add__(self, other: "PositionCounts") -> "PositionCounts":
        return PositionCounts(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def as_tuple(self):
        return self.accepted, self.tested, self.agree, self.measured

    @property
    def acceptance(self) -> list[float]:
        """Accepted over tested, by position (nan where nothing was tested)."""
        return [a / t if t else float("nan") for a, t in zip(self.accepted.tolist(), self.tested.tolist())]

    @property
    def agreement(self) -> list[float]:
        return [a / m if m else float("nan") for a, m in zip(self.agree.tolist(), self.measured.tolist())]

    @property
    def mean_accepted(self) -> float:
        """Expected drafts accepted per step when drafting K: the sum over k of P(positions 1..k accepted)."""
        starts = int(self.tested[0]) if self.tested.numel() else 0
        return float(self.accepted.sum()) / starts if starts else float("nan")


def position_counts(draft_top: torch.Tensor, target_top: torch.Tensor, followed: torch.Tensor, available: torch.Tensor) -> PositionCounts:
    """Per start n and draft position k (columns): draft_top (N, K) the head's top-1 token;
    target_top (N, K) the target's greedy token at that point; followed (N, K) whether the token
    the head was given next equals target_top (the text went on as the target would);
    available (N, K) whether position k exists (inside the sequence)."""
    agree = (draft_top == target_top) & available
    ok = agree & followed  # drafting would go on past position k with this very text
    before = torch.ones_like(agree[:, :1])
    chain = torch.cat([before, ok[:, :-1].cumprod(dim=1).bool()], dim=1)  # positions 1..k-1 accepted and followed
    tested = chain & available
    return PositionCounts(accepted=(tested & agree).sum(0), tested=tested.sum(0), agree=agree.sum(0), measured=available.sum(0))


def empty_counts(k: int) -> PositionCounts:
    zero = torch.zeros(k, dtype=torch.long)
    return PositionCounts(zero, zero.clone(), zero.clone(), zero.clone())
