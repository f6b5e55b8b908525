"""Logits -> probabilities (temperature, top-k, top-p), applied the same way to draft and target."""

from __future__ import annotations

import torch


def probs_from_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """(N, V) logits -> (N, V) float32 probabilities.

    temperature 0 (greedy) returns the plain softmax, used only to show how sure each model was.
    Any temperature > 0 gives a finite row; one so small that logits / T overflows gives the greedy
    limit (all mass on the best token, shared only by exact ties).
    """
    logits = logits.float()
    if temperature == 0:
        return torch.softmax(logits, dim=-1)
    # Shift the best logit to 0 before dividing: a tiny temperature then sends the others to -inf
    # (the greedy limit, a one-hot row) instead of sending the best to +inf (inf - inf: NaN).
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k > 0 and top_k < logits.shape[-1]:
        kth_best = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (N, V)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # probability of strictly better tokens
        drop_sorted = mass_before >= top_p  # the best token always survives (mass_before == 0)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, dim=-1)

