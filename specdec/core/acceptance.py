"""Which draft tokens the target keeps, and the one token it adds. Pure functions on tensors.

Both rules return device tensors (n_accepted, next_token) so the caller can fetch them, together
with anything else it wants, in a single host read. Neither reads the device itself: indexing with
a 0-d device tensor would (it becomes an `.item()`), so positions are picked with gather and
index_select, and tokens are drawn with an exponential race instead of torch.multinomial (which
checks its input on the host; for one sample torch draws by the same race, so a seeded run draws
the same tokens either way).
"""

from __future__ import annotations

import torch


def greedy_accept(draft_ids: torch.Tensor, target_logits: torch.Tensor,
                  n_drafted: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep draft tokens while they equal the target's argmax.

    draft_ids: (K,), target_logits: (K+1, V) where row i scores the token after draft i-1.
    n_drafted: a 0-d device tensor when only the first n of the K drafts count (the draft stopped
    early on the device: specdec.core.proposers.model); None: all K.
    Returns n_accepted (scalar, 0..K) and next_token: the target's argmax right after the kept
    prefix (a correction if n < K, a bonus token if n == K).
    """
    k = draft_ids.shape[0]
    target_ids = target_logits.argmax(dim=-1)  # (K+1,)
    matches = draft_ids == target_ids[:k]  # (K,)
    if n_drafted is not None:
        matches &= torch.arange(k, device=draft_ids.device) < n_drafted
    n_accepted = matches.int().cumprod(dim=0).sum()  # length of the matching prefix
    return n_accepted, target_ids.gather(0, n_accepted.view(1)).squeeze(0)


def speculative_sample(
    draft_ids: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor | None,
    generator: torch.Generator | None,
    n_drafted: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rejection sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023).

    draft_ids: (K,); p: (K+1, V) target probabilities; q: (K, V) draft probabilities, or None when
    the drafter is deterministic (prompt lookup: q is one-hot on each draft token).
    Draft i is kept with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection the
    token is drawn from normalise(max(0, p - q)); if all K are kept, from p_K (the bonus token).
    The output is distributed exactly as sampling from p alone.
    n_drafted: as in greedy_accept (drafts past it count as not drafted: the token after the last
    counted draft is drawn from p itself, the bonus distribution).
    Draws, in this order from `generator`: K uniforms u, then one race over the vocabulary.
    """
    k, vocab = draft_ids.shape[0], p.shape[-1]
    if q is None:
        q = one_hot(draft_ids, vocab, p)
    p_drafted = p[:k].gather(1, draft_ids[:, None]).squeeze(1)  # (K,)
    q_drafted = q.gather(1, draft_ids[:, None]).squeeze(1)  # (K,)
    u = torch.rand(k, generator=generator, device=p.device)  # (K,)
    kept = u * q_drafted < p_drafted  # u < p/q without dividing by a zero q
    if n_drafted is not None:
        counted = torch.arange(k, device=p.device) < n_drafted  # (K,)
        kept &= counted
        q = q * counted[:, None]  # past the last counted draft nothing was drafted: q = 0 there
    n_accepted = kept.int().cumprod(dim=0).sum()
    # Row K of q_padded is zero, so the same expression gives the residual after a rejection and
    # the plain target distribution for the bonus token: no branch and no host read.
    q_padded = torch.cat([q, q.new_zeros(1, vocab)])  # (K+1, V)
    at = n_accepted.view(1)
    left = residual(p.index_select(0, at)[0], q_padded.index_select(0, at)[0])  # (V,)
    return n_accepted, race_sample(left[None], generator).squeeze(0)


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


def race_sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """(N, V) probabilities (unnormalised rows are fine) -> (N,) sampled ids, by an exponential
    race: argmax over i of p_i / E_i with E_i ~ Exp(1) independent picks i with probability
    p_i / sum(p) (the first arrival of independent exponential clocks of rates p_i). Unlike
    torch.multinomial it reads nothing on the host. A zero p_i never wins."""
    clocks = torch.empty_like(probs, dtype=torch.float32).exponential_(generator=generator)  # (N, V)
    score = torch.where(probs > 0, probs.float() / clocks.clamp_min(1e-30), -1.0)
    return score.argmax(dim=-1)
