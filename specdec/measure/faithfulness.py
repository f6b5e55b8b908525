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

Our kernels are read in one pass over the prompt and the reference output (`forced_predictions`);
a real engine's server is asked one position at a time (specdec.engines.llamacpp.forced_predictions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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


@torch.inference_mode()
def forced_top2(model: CachedModel, prompt_ids: list[int], reference: list[int]) -> tuple[list[int], list[float]]:
    """The top-1 next token after the prompt and each prefix of `reference`, and the gap between its
    best two logits there, from one pass of `model` (a fresh CachedModel: its cache is filled and left
    as it is) over prompt + reference[:-1]."""
    if not reference:
        return [], []
    ids = torch.tensor(list(prompt_ids) + list(reference[:-1]), device=model.device)  # (P + R - 1,)
    logits = model.forward(ids, last_only=False)[len(prompt_ids) - 1 :].float()  # (R, V)
    top = logits.topk(2, dim=-1)  # values, indices: (R, 2)
    return top.indices[:, 0].tolist(), (top.values[:, 0] - top.values[:, 1]).tolist()


def forced_predictions(model: CachedModel, prompt_ids: list[int], reference: list[int]) -> list[int]:
    """The top-1 next token after the prompt and each prefix of `reference` (forced_top2's first half)."""
    return forced_top2(model, prompt_ids, reference)[0]


def faithfulness(ids: list[int], reference: list[int], predicted: list[int] | None,
                 tied: list[bool] | None = None) -> Faithfulness:
    """The figures for one output, given its forced predictions along `reference` (None: not
    measured) and which of the reference's positions are tied (None: not known)."""
    untied = None if predicted is None or tied is None else untied_agreement(predicted, reference, tied)
    return Faithfulness(first_departure(ids, reference), None if predicted is None else top1_agreement(predicted, reference),
                        len(reference), untied, None if tied is None else sum(tied))
