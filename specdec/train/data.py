"""The head's training data on disk: sequences of token ids with the target's features, in shards.

A sequence is ids (n,) and features (n, H): features[t] is the target's last hidden state after its
final norm at position t (the row its lm_head turns into the distribution of token t+1), in bf16;
with the target's TOP most likely next tokens there and their log-probabilities (over the whole
vocabulary), the soft labels, computed once when the features are. `answer_from` is the first
position the target wrote itself (a self-distilled answer; 0 for text read from a file): the
validation figures count only the drafts of those tokens.

A shard is one safetensors file, written to a temporary name and renamed when complete, so an
interrupted run leaves either a whole shard or none; a shard that does not read back whole is
written again (specdec/train/collect.py numbers them, so a resumed run knows which are done).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

TOP = 16  # next tokens kept per position as soft labels (their share of the probability: docs/benchmarks.md)


@dataclass
class Sequence:
    ids: torch.Tensor  # (n,) int64
    features: torch.Tensor  # (n, H) bf16
    top_ids: torch.Tensor  # (n, TOP) int64: the target's most likely next tokens, most likely first
    top_logp: torch.Tensor  # (n, TOP) float32: their log-probabilities
    answer_from: int = 0  # first position the target generated (0: all of it was read)
    layers: torch.Tensor | None = None  # (n, 2, H) bf16: the target's hidden states after a low and a middle layer (Recipe.fusion); None: not kept

    def cut(self, start: int, end: int) -> "Sequence":
        layers = self.layers[start:end] if self.layers is not None else None
        return Sequence(self.ids[start:end], self.features[start:end], self.top_ids[start:end], self.top_logp[start:end],
                        max(0, self.answer_from - start), layers)

    def __len__(self) -> int:
        return self.ids.shape[0]


def write_shard(path: Path, sequences: list[Sequence], kind: str) -> None:
    from safetensors.torch import save_file

    tensors = {
        "ids": torch.cat([s.ids for s in sequences]).to(torch.int32),
        "features": torch.cat([s.features for s in sequences]).to(torch.bfloat16).contiguous(),
        "lengths": torch.tensor([len(s) for s in sequences], dtype=torch.int64),
        "answer_from": torch.tensor([s.answer_from for s in sequences], dtype=torch.int64),
        "top_ids": torch.cat([s.top_ids for s in sequences]).to(torch.int32),
        "top_logp": torch.cat([s.top_logp for s in sequences]).float().contiguous(),
    }
    if all(s.layers is not None for s in sequences):
        tensors["layers"] = torch.cat([s.layers for s in sequences]).to(torch.bfloat16).contiguous()
    partial = path.with_name(f".{path.name}.partial")
    save_file(tensors, partial, metadata={"kind": kind})
    os.replace(partial, path)


def read_shard(path: Path) -> list[Sequence] | None:
    """The shard's sequences, or None when the file is missing or does not read back whole."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        t = load_file(path)
        lengths, starts = t["lengths"].tolist(), t["answer_from"].tolist()
        if not sum(lengths) == t["ids"].shape[0] == t["features"].shape[0] == t["top_ids"].shape[0] == t["top_logp"].shape[0]:
            return None
        layers = t.get("layers")
        if layers is not None and layers.shape[0] != t["ids"].shape[0]:
            return None
    except (OSError, SafetensorError, KeyError, RuntimeError):
        return None
    out, at = [], 0
    for n, start in zip(lengths, starts):
        out.append(Sequence(t["ids"][at : at + n].long(), t["features"][at : at + n], t["top_ids"][at : at + n].long(),
                            t["top_logp"][at : at + n], start, layers[at : at + n] if layers is not None else None))
        at += n
    return out


def shard_path(folder: Path, kind: str, split: str, index: int) -> Path:
    return Path(folder) / f"{kind}-{split}-{index:05d}.safetensors"


def load_split(folder: Path, split: str) -> list[Sequence]:
    """Every sequence of the shards of one split ("train" or "val"), in shard order."""
    out = []
    for path in sorted(Path(folder).glob(f"*-{split}-*.safetensors")):
        out.extend(read_shard(path) or [])
    return out


def windows(sequences: list[Sequence], length: int) -> list[Sequence]:
    """Sequences cut into windows of at most `length` positions (the head's context starts anew at
    each window; the target's features keep theirs). A window shorter than 8 positions is dropped."""
    out = []
    for s in sequences:
        for start in range(0, len(s), length):
            piece = s.cut(start, start + length)
            if len(piece) >= 8:
                out.append(piece)
    return out


def read_json(path: Path, default):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


def write_json(path: Path, value) -> None:
    partial = Path(path).with_name(f".{Path(path).name}.partial")
    partial.write_text(json.dumps(value, indent=1))
    os.replace(partial, path)
