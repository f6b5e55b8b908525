"""Which draft tokens the target keeps, and the one token it adds. Pure functions on tensors.

Both rules return device tensors (n_accepted, next_token) so the caller can fetch them, together
with anything else it wants, in a single host sync.
"""

from __future__ import annotations

import torch


def greedy_accept(draft_ids: torch.Tensor, target_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep draft tokens while they equal the target's argmax.

    draft_ids: (K,), target_logits: (K+1, V) where row i scores the token after draft i-1.
    Returns n_accepted (scalar, 0..K) and next_token: the target's argmax right after the kept
    prefix (a correction if n < K, a bonus token if n == K).
    """
    k = draft_ids.shape[0]
    target_ids = target_logits.argmax(dim=-1)  # (K+1,)
    matches = (draft_ids == target_ids[:k]).int()  # (K,)
    n_accepted = matches.cumprod(dim=0).sum()  # length of the matching prefix
    return n_accepted, target_ids[n_accepted]


def speculative_sample(
    draft_ids: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor | None,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rejection sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023).

    draft_ids: (K,); p: (K+1, V) target probabilities; q: (K, V) draft probabilities, or None when
    the drafter is deterministic (prompt lookup: q is one-hot on each draft token).
    Draft i is kept with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection the
    token is drawn from normalise(max(0, p - q)); if all K are kept, from p_K (the bonus token).
    The output is distributed exactly as sampling from p alone.
    """
    k, vocab = draft_ids.shape[0], p.shape[-1]
    rows = torch.arange(k, device=p.device)
    if q is None:
        q = one_hot(draft_ids, vocab, p)
    p_drafted = p[rows, draft_ids]  # (K,)
    q_drafted = q[rows, draft_ids]  # (K,)
    u = torch.rand(k, generator=generator, device=p.device)
    kept = (u * q_drafted < p_drafted).int()  # u < p/q without dividing by a zero q
    n_accepted = kept.cumprod(dim=0).sum()
    # Row K of q_padded is zero, so the same expression gives the residual after a rejection and
    # the plain target distribution for the bonus token: no branch and no host sync.
    q_padded = torch.cat([q, q.new_zeros(1, vocab)])  # (K+1, V)
    next_token = torch.multinomial(residual(p[n_accepted], q_padded[n_accepted]), 1, generator=generator).squeeze(0)
    return n_accepted, next_token


def one_hot(draft_ids: torch.Tensor, vocab: int, like: torch.Tensor) -> torch.Tensor:
    """(K, V) draft distribution of a deterministic drafter: all mass on each draft token."""
    return torch.zeros(draft_ids.shape[0], vocab, device=like.device, dtype=like.dtype).scatter_(1, draft_ids[:, None], 1.0)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalise(max(0, p - q)) over the vocabulary: what the target samples from after rejecting a
    draft token. p, q: (V,). Where p <= q everywhere (p == q) there is nothing left over, and p is
    returned; with q all zero (no draft at this position) it is p itself, the bonus distribution."""
    left = (p - q).clamp_min(0.0)  # (V,)
    total = left.sum()
    return torch.where(total > 0, left / total.clamp_min(1e-30), p)
