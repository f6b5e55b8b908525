"""The head's vocabulary, counted from the target's own tokens in the training data.

The head drafts from a subset of the target's 151936 tokens (a full lm_head would cost it more than
the rest of its step). Which subset matters: a token outside it is a certain rejection wherever the
target writes it. A list counted from Python's standard library and a word list leaves out the code
fence that opens most of the target's answers, SQL keywords and JSON punctuation. So the list is
counted from what the head must draft: the target's greedy next token at every position of the
training data (its own answers and the text it read), most frequent first, then filled from the
shipped frequency list (specdec/models/vocab_subset.py), with the end-of-sequence and special tokens
always in (specdec.kernels.head_offer.head_ids with these counts). The held-out data is never counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import torch

from specdec.train.data import Sequence


def target_counts(sequences: Iterable[Sequence]) -> Counter:
    """token id -> how often the target's greedy next token is that token, over every position."""
    counts: Counter = Counter()
    for s in sequences:
        counts.update(s.top_ids[:, 0].tolist())
    return counts


def coverage(ids: torch.Tensor, tokens: torch.Tensor) -> float:
    """The share of `tokens` (any shape) that the vocabulary `ids` holds (nan when there are none)."""
    if tokens.numel() == 0:
        return float("nan")
    return float(torch.isin(tokens.flatten(), ids.to(tokens.device)).float().mean())


def written_tokens(sequences: Iterable[Sequence]) -> torch.Tensor:
    """(n,) the tokens the target wrote: every answer's tokens after its prompt, every read text's greedy next tokens."""
    parts = [s.ids[s.answer_from :] if s.answer_from > 0 else s.top_ids[:, 0] for s in sequences]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)


def training_vocabulary(pair, sequences: Iterable[Sequence], size: int) -> torch.Tensor:
    """(N,) sorted: the vocabulary a head trained on `sequences` drafts from (this module's docstring)."""
    from specdec.kernels.head_offer import head_ids

    return head_ids(pair, size, counts=target_counts(sequences))
