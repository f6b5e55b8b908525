"""Which tokens a truncated draft head scores: the N most frequent (FR-Spec, Zhao et al. 2025).

A vocabulary of 151936 tokens makes the draft's output projection its largest single matrix,
yet most of those tokens are rare. The draft may score only a frequent subset: in greedy mode it
proposes the argmax over the subset; in sampling mode its q is a softmax over the subset (the
head fills every other logit with -inf), so rejection sampling stays exact. A token outside the
subset can still be emitted: the target's own correction supplies it.

The frequency order comes from a file shipped in assets/ (built offline by
experiments/build_draft_vocab.py from Python's standard library sources and wordfreq's word lists;
see that script for sources and licences), tied to one tokenizer by a fingerprint of its
vocabulary, so a list is never applied to a tokenizer it was not counted for.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch

ASSETS = Path(__file__).resolve().parents[2] / "assets"
FREQUENCY_FILES = [ASSETS / "draft_vocab_qwen2.5.json"]  # ids most frequent first, with their tokenizer's fingerprint


def fingerprint(tokenizer) -> str:
    """SHA-256 of the tokenizer's vocabulary (token -> id, sorted): equal for equal vocabularies."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def count_tokens(tokenizer, texts: Iterable[tuple[str, float]]) -> Counter:
    """Weighted token counts: each (text, weight) adds `weight` to every token of its encoding."""
    counts: Counter = Counter()
    for text, weight in texts:
        for token in tokenizer(text, add_special_tokens=False)["input_ids"]:
            counts[token] += weight
    return counts


def ranked_ids(counts: Counter) -> list[int]:
    """Most frequent first; ties broken by id so the order is deterministic."""
    return [t for t, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


def frequency_order(tokenizer) -> list[int]:
    """The shipped frequency order for this tokenizer; ValueError when none was counted for it."""
    mark = fingerprint(tokenizer)
    for path in FREQUENCY_FILES:
        data = json.loads(path.read_text())
        if data["fingerprint"] == mark:
            return data["ids"]
    raise ValueError(
        "no token frequency list for this tokenizer (truncated-vocabulary draft variants ship one for the "
        "Qwen2.5 tokenizer); build one with python -m experiments.build_draft_vocab or pick a variant without -v16k/-v32k"
    )


def subset_ids(order: list[int], size: int, always: Iterable[int], vocab_size: int) -> torch.Tensor:
    """(N,) sorted ids: the tokens in `always` (end-of-sequence and other special tokens: the draft
    must be able to propose them) plus the most frequent others, N = min(size, vocab_size)."""
    size = min(size, vocab_size)
    keep = [t for t in dict.fromkeys(always) if 0 <= t < vocab_size][:size]
    chosen = set(keep)
    for t in order:
        if len(keep) >= size:
            break
        if t < vocab_size and t not in chosen:
            keep.append(t)
            chosen.add(t)
    if len(keep) < size:  # the list is shorter than asked: fill with the lowest unused ids (deterministic)
        keep += [t for t in range(vocab_size) if t not in chosen][: size - len(keep)]
    return torch.tensor(sorted(keep), dtype=torch.long)
