"""The one read of a step: everything its event needs, packed on the device, copied to the host once."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Checked:
    """What one target pass decided, read to the host in the step's one transfer."""

    drafted: list[int]  # (K,) the drafted ids
    accepted: int  # drafts the rule kept
    token: int  # the target's own token after them (a correction, or the bonus when all K were kept)
    p_target: list[float]  # (K,) p of each drafted token under the target
    p_draft: list[float]  # (K,) q of each drafted token (1.0 where prompt lookup drafted)
    margins: list[float]  # (K+1,) the target's top-1 minus top-2 logit at each scored position
    source: str  # who drafted: "model", "lookup", or "" (nothing)
    draft_s: float
    verify_s: float


def pack(head: list[torch.Tensor], ids: torch.Tensor, probs: torch.Tensor, q: torch.Tensor | None,
         logits: torch.Tensor) -> torch.Tensor:
    """One float64 tensor: head (0-d tensors: n_accepted, next_token, and the drafts that count
    when the draft stopped early), ids (K,), p and q of each draft (K,), margins (K+1,).
    probs, logits: (K+1, V) of the target; q: (K, V) of the draft, None for prompt lookup."""
    k = ids.shape[0]
    p_drafted = probs[:k].gather(1, ids[:, None]).squeeze(1)  # (K,)
    q_drafted = q.gather(1, ids[:, None]).squeeze(1) if q is not None else torch.ones(k, device=probs.device)
    top2 = logits.float().topk(2, dim=-1).values  # (K+1, 2)
    return torch.cat([torch.stack(head).double(), ids.double(), p_drafted.double(), q_drafted.double(),
                      (top2[:, 0] - top2[:, 1]).double()])


def unpack(values: list[float], heads: int, k: int, source: str, seconds: tuple[float, float]) -> Checked:
    """The host's side of pack: values as read, `heads` head values, K drafts. A third head value
    (the drafts that count) cuts the drafts, their p and q to that many."""
    counted = int(values[2]) if heads > 2 else k
    body = values[heads:]
    return Checked(
        drafted=[int(t) for t in body[:counted]],
        accepted=int(values[0]),
        token=int(values[1]),
        p_target=body[k : k + counted],
        p_draft=body[2 * k : 2 * k + counted],
        margins=body[3 * k :],
        source=source,
        draft_s=seconds[0],
        verify_s=seconds[1],
    )
