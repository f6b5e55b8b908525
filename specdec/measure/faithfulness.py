"""How faithful a target kernel is to the dense target: each quantized kernel is a slightly
different model, and this says by how much.

Two figures, both against plain greedy decoding of the dense (`bf16`) target, the reference:

- `first_departure`: the first position where a kernel's own greedy output leaves the reference's
  (None: the same tokens all along). One early flip changes every token after it, so this is
  harsh, and it says where a reader of the two texts would first see them differ.
- `top1_agreement`: teacher forcing. Along the reference's own output, the share of positions where
  the kernel's top-1 next token is the reference's token. Every position is judged on the same
  prefix, so one flip costs one position, not the rest of the text: this is the per-token figure.

Our kernels are read in one pass over the prompt and the reference output (`forced_predictions`);
a real engine's server is asked one position at a time (specdec.engines.llamacpp.forced_predictions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.core.cached_model import CachedModel


@dataclass(frozen=True)
class Faithfulness:
    """One kernel's (or engine's) output on one prompt, against the dense target's."""

    first_departure: int | None  # index of the first new token that differs; None: identical over `compared`
    top1_agreement: float | None  # share of positions along the reference where the top-1 is the reference's token
    compared: int  # new tokens of the reference that were compared


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


@torch.inference_mode()
def forced_predictions(model: CachedModel, prompt_ids: list[int], reference: list[int]) -> list[int]:
    """The top-1 next token after the prompt and each prefix of `reference`, from one pass of `model`
    (a fresh CachedModel: its cache is filled and left as it is) over prompt + reference[:-1]."""
    if not reference:
        return []
    ids = torch.tensor(list(prompt_ids) + list(reference[:-1]), device=model.device)  # (P + R - 1,)
    logits = model.forward(ids, last_only=False)  # (P + R - 1, V)
    return logits[len(prompt_ids) - 1 :].argmax(dim=-1).tolist()  # (R,)


def faithfulness(ids: list[int], reference: list[int], predicted: list[int] | None) -> Faithfulness:
    """Both figures for one output, given its forced predictions along `reference` (None: not measured)."""
    return Faithfulness(first_departure(ids, reference), None if predicted is None else top1_agreement(predicted, reference),
                        len(reference))
