"""How faithful a target kernel is to the dense target: each quantized kernel is a slightly
different model, and this says by how much.

Two figures, both against plain greedy decoding of the dense target (the `dense` kernel), the reference:

- `first_departure`: the first position where a kernel's own greedy output leaves the reference's
  (None: the same tokens all along). One early flip changes every token after it, so this is
  harsh, and it says where a reader of the two texts would first see them differ.
- `top1_agreement`: teacher forcing. Along the reference's own output, the share of positions where
  the kernel's top-1 next token is the reference's token. Every position is judged on the same
  prefix, so one flip costs one position, not the rest of the text: this is the per-token figure.
- `top1_agreement_untied`: the same over the positions where the reference itself is not tied: its
  own top-2 logits are at least the tie margin of its dtype apart (specdec.measure.compare
  TIE_MARGIN; 0.5 in bf16, whose logits near 20 are 0.125 apart). Where the reference's best two
  tokens are equal at its own precision, which one it printed is rounding, and any model computed
  another way may pick the other: a flip there says nothing about the kernel.

- `kl`: the KL divergence KL(dense || kernel) of the kernel's next-token distribution from the
  reference's, in nats, summed over the vocabulary and averaged over the positions of the reference's
  output (teacher-forced, as above). Top-1 agreement only says whether the best token moved; this
  says how far the whole distribution did, which is what sampling at a temperature draws from.
- `kl_top`: the same divergence with the vocabulary cut into the reference's KL_TOP most likely
  tokens, one bucket each, and one bucket for all the rest. Merging outcomes never increases a KL
  divergence, so this is a lower bound of `kl`. It is what can be had from a server that lists only
  its most likely tokens' log-probabilities (llama.cpp's `n_probs`): our kernels report both, so the
  bound's distance from the whole figure is measured beside it.

Our kernels are read in one pass over the prompt and the reference output (`forced_pass`); a real
engine's server is asked one position at a time (specdec.engines.llamacpp.forced_predictions and
forced_tops).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specdec.core.runners.eager_model import CachedModel


@dataclass(frozen=True)
class Faithfulness:
    """One kernel's (or engine's) output on one prompt, against the dense target's."""

    first_departure: int | None  # index of the first new token that differs; None: identical over `compared`
    top1_agreement: float | None  # share of positions along the reference where the top-1 is the reference's token
    compared: int  # new tokens of the reference that were compared
    top1_agreement_untied: float | None = None  # the same over the positions where the reference is not tied
    tied: int | None = None  # positions where the reference's own top-2 logits are within its tie margin


def first_departure(ids: list[int], reference: list[int]) -> int | None:
    """The first index where `ids` leaves `reference` (a run that ends early departs where it ended);
    None when both hold the same tokens."""
    for i in range(max(len(ids), len(reference))):
        if i >= len(ids) or i >= len(reference) or ids[i] != reference[i]:
            return i
    return None


def top1_agreement(predicted: list[int], reference: list[int]) -> float | None:
    """predicted[i]: the model's top-1 after the prompt and reference[:i]. None with nothing to compare."""
    if not reference:
        return None
    if len(predicted) != len(reference):
        raise ValueError(f"{len(predicted)} predictions for a reference of {len(reference)} tokens")
    return sum(p == r for p, r in zip(predicted, reference)) / len(reference)


def untied_agreement(predicted: list[int], reference: list[int], tied: list[bool]) -> float | None:
    """top1_agreement over the positions i where tied[i] is False. None with none left to compare."""
    kept = [(p, r) for p, r, t in zip(predicted, reference, tied, strict=True) if not t]
    return top1_agreement([p for p, _ in kept], [r for _, r in kept])


KL_TOP = 20  # the reference's most likely tokens that get a bucket each in `kl_top`
LISTED = 2 * KL_TOP  # log-probabilities asked of each position (a server's n_probs): the reference's top 20 are nearly always among them


@dataclass(frozen=True)
class ForcedPass:
    """A model's next-token choices along a reference text, each after the prompt and the reference's prefix."""

    predicted: list[int]  # top-1 at each position
    margins: list[float]  # the gap between its best two logits there
    logprobs: torch.Tensor  # (R, V) float64: its log-softmax over the vocabulary at each position


@torch.inference_mode()
def forced_pass(model: CachedModel, prompt_ids: list[int], reference: list[int]) -> ForcedPass:
    """One pass of `model` (a fresh CachedModel: its cache is filled and left as it is) over prompt +
    reference[:-1], read at the positions that predict each token of `reference`."""
    if not reference:
        return ForcedPass([], [], torch.empty(0, 0))
    ids = torch.tensor(list(prompt_ids) + list(reference[:-1]), device=model.device)  # (P + R - 1,)
    logits = model.forward(ids, last_only=False)[len(prompt_ids) - 1 :].float()  # (R, V)
    top = logits.topk(2, dim=-1)  # values, indices: (R, 2)
    # In float64: a kernel that barely moves the distribution is 1e-6 nats from dense, about float32's rounding of
    # the log-probabilities summed over the vocabulary, so in float32 the rounding could outweigh the figure.
    logprobs = logits.double().log_softmax(-1).cpu()  # (R, V)
    return ForcedPass(top.indices[:, 0].tolist(), (top.values[:, 0] - top.values[:, 1]).tolist(), logprobs)


def forced_top2(model: CachedModel, prompt_ids: list[int], reference: list[int]) -> tuple[list[int], list[float]]:
    """The top-1 next token after the prompt and each prefix of `reference`, and the gap between its
    best two logits there (forced_pass's first two fields)."""
    p = forced_pass(model, prompt_ids, reference)
    return p.predicted, p.margins


def forced_predictions(model: CachedModel, prompt_ids: list[int], reference: list[int]) -> list[int]:
    """The top-1 next token after the prompt and each prefix of `reference` (forced_top2's first half)."""
    return forced_top2(model, prompt_ids, reference)[0]


def kl(reference: torch.Tensor, other: torch.Tensor) -> float | None:
    """KL(reference || other) in nats, from log-probabilities (R, V) each, averaged over the R positions;
    None with no positions."""
    if reference.shape[0] == 0:
        return None
    if reference.shape != other.shape:
        raise ValueError(f"log-probabilities of shapes {tuple(reference.shape)} and {tuple(other.shape)}")
    per_position = F.kl_div(other.double(), reference.double(), log_target=True, reduction="none").sum(-1)  # (R,)
    return float(per_position.mean())


def listed(logprobs: torch.Tensor, n: int = LISTED) -> list[dict[int, float]]:
    """Each position's n most likely tokens and their log-probabilities, as a server lists them."""
    top = logprobs.topk(min(n, logprobs.shape[-1]), dim=-1)
    return [dict(zip(i.tolist(), v.tolist())) for i, v in zip(top.indices, top.values)]


def kl_top(reference: torch.Tensor, other: list[dict[int, float]], n: int = KL_TOP) -> float | None:
    """A lower bound of KL(reference || other), averaged over positions: at each, the reference's n most
    likely tokens that `other` lists (token -> log-probability) are a bucket each, and every other
    token of the vocabulary falls in one more bucket, whose probability is what the listed ones leave."""
    if reference.shape[0] == 0:
        return None
    if len(other) != reference.shape[0]:
        raise ValueError(f"{len(other)} listed positions for {reference.shape[0]} reference positions")
    total = 0.0
    for row, theirs in zip(reference, other):
        ids = [i for i in row.topk(min(n, row.shape[0])).indices.tolist() if i in theirs]
        p = [math.exp(float(row[i])) for i in ids]
        q = [math.exp(theirs[i]) for i in ids]
        p_rest, q_rest = max(0.0, 1.0 - sum(p)), max(1e-300, 1.0 - sum(q))  # the rest of the vocabulary; q's is never 0
        total += sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0) + (p_rest * math.log(p_rest / q_rest) if p_rest > 0 else 0.0)
    return total / reference.shape[0]


def faithfulness(ids: list[int], reference: list[int], predicted: list[int] | None,
                 tied: list[bool] | None = None) -> Faithfulness:
    """The figures for one output, given its forced predictions along `reference` (None: not
    measured) and which of the reference's positions are tied (None: not known)."""
    untied = None if predicted is None or tied is None else untied_agreement(predicted, reference, tied)
    return Faithfulness(first_departure(ids, reference), None if predicted is None else top1_agreement(predicted, reference),
                        len(reference), untied, None if tied is None else sum(tied))
