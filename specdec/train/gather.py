"""The data phases: the target answers the written prompts and reads installed text, shard by shard.

Shards are numbered and each is a fixed function of the seed and its number, so a resumed run
skips the shards on disk and writes the next ones. Held-out shards (`val`) come first and are the
same for any budget; training shards follow until the plan's amount (or the time share that
decides it) is reached.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specdec.train.collect import answer, fused_layers, read_features
from specdec.train.corpus import chunks, documents
from specdec.train.data import read_shard, shard_path, write_shard
from specdec.train.prompt_material import Material
from specdec.train.prompts import functions_of, written
from specdec.train.recipe import Recipe

SNIPPET_DOCS = 300  # training documents whose functions the edit prompts quote
MATERIAL_DOCS = 2000  # training documents version 2's prompts take tasks and sentences from (about 7 s to parse)
CHUNKS_PER_SHARD = 8


@dataclass
class Sources:
    """The written prompts and the text to read, in the seed's order."""

    prompts: list[str]  # held-out first (recipe.val_answers of them), then training
    val_chunks: list[list[int]]  # held-out chunks of read text
    train_docs: int  # documents to skip before the training text starts (the held-out ones)
    held_kinds: list[str]  # the kind of text each held-out prompt asks for (specdec.train.prompts.KINDS)

    @classmethod
    def of(cls, pair, recipe: Recipe, seed: int, root: Path | None = None, count: int = 4000) -> "Sources":
        docs = documents(seed, root)
        val, used = [], 0
        for _, text in docs:
            used += 1
            val += chunks(pair.tokenizer(text)["input_ids"], recipe.chunk)
            if len(val) >= recipe.val_chunks:
                break
        snippets, material = [], Material()  # from the training documents: the held-out text is never quoted in a prompt
        for index, (name, text) in enumerate(itertools.islice(docs, SNIPPET_DOCS if recipe.prompts == 1 else MATERIAL_DOCS)):
            if name.endswith(".py") and index < SNIPPET_DOCS:
                snippets += functions_of(text)
            if recipe.prompts >= 2:
                material.add(name, text)
        kinds, prompts = zip(*written(seed, count, snippets, recipe.prompts, material)) if count else ((), ())
        held = list(prompts[: recipe.val_answers])  # in the order written: every kind, every length
        return cls(held + alike_in_length(list(prompts[len(held) :]), 4 * recipe.answer_batch), val[: recipe.val_chunks], used,
                   list(kinds[: recipe.val_answers]))

    def train_chunks(self, pair, recipe: Recipe, seed: int, root: Path | None = None) -> Iterator[list[int]]:
        for _, text in itertools.islice(documents(seed, root), self.train_docs, None):
            yield from chunks(pair.tokenizer(text)["input_ids"], recipe.chunk)


def alike_in_length(prompts: list[str], group: int) -> list[str]:
    """Each run of `group` prompts sorted by length: the prompts of one batch are then alike in
    length, and the batch's left padding (computed, then thrown away) small."""
    return [p for i in range(0, len(prompts), group) for p in sorted(prompts[i : i + group], key=len)]


def kept(pair, recipe: Recipe) -> tuple[int, int] | None:
    """The target's layers whose rows the data keeps beside its features (Recipe.fusion), else None."""
    return fused_layers(pair.target.config) if recipe.fusion else None


def answer_shard(pair, recipe: Recipe, prompts: list[str]) -> list:
    ids = [pair.encode_prompt(p, pair.chat, recipe.answer_tokens) for p in prompts]
    return answer(pair.target, ids, recipe.answer_tokens, set(pair.eos_ids), pair.tokenizer.pad_token_id or 0, kept(pair, recipe))


def text_shard(pair, recipe: Recipe, chunks: list[list[int]]) -> list:
    return read_features(pair.target, chunks, kept(pair, recipe))


def ensure(path: Path, make: Callable[[], list], kind: str) -> int:
    """The shard at `path` (made and written when missing or unreadable) -> its tokens."""
    found = read_shard(path)
    if found is None:
        found = make()
        write_shard(path, found, kind)
    return sum(len(s) for s in found)


def held_out(pair, recipe: Recipe, sources: Sources, folder: Path, bar) -> None:
    """The validation shards: the first val_answers prompts answered, the held-out chunks read."""
    val_prompts = sources.prompts[: recipe.val_answers]
    for i in range(0, len(val_prompts), recipe.answer_batch):
        bar(ensure(shard_path(folder, "answers", "val", i // recipe.answer_batch),
                   lambda: answer_shard(pair, recipe, val_prompts[i : i + recipe.answer_batch]), "answers"))
    bar(ensure(shard_path(folder, "code", "val", 0), lambda: text_shard(pair, recipe, sources.val_chunks), "code"))


def answers_phase(pair, recipe: Recipe, sources: Sources, folder: Path, count: int | None, until: float, bar) -> int:
    """Training answers: shards of answer_batch prompts, up to `count` prompts or, when count is
    None, until time.monotonic() passes `until`. -> the prompts answered."""
    pool = sources.prompts[recipe.val_answers :]
    done = 0
    for index in itertools.count():
        late = count is None and index > 0 and time.monotonic() >= until  # at least one shard
        if (count is not None and done >= count) or late or done >= len(pool):
            break
        end = done + recipe.answer_batch if count is None else min(done + recipe.answer_batch, count)
        batch = pool[done:end]
        bar(ensure(shard_path(folder, "answers", "train", index), lambda: answer_shard(pair, recipe, batch), "answers"))
        done += len(batch)
    return done


def code_phase(pair, recipe: Recipe, sources: Sources, folder: Path, tokens: int | None, until: float, seed: int, bar,
               root: Path | None = None) -> int:
    """Training text: shards of CHUNKS_PER_SHARD chunks, up to `tokens` tokens or, when tokens is
    None, until time.monotonic() passes `until`. -> the tokens read."""
    stream = sources.train_chunks(pair, recipe, seed, root)
    done = 0
    for index in itertools.count():
        if (tokens is not None and done >= tokens) or (tokens is None and index > 0 and time.monotonic() >= until):
            break
        batch = []
        for chunk in stream:
            batch.append(chunk[: tokens - done - sum(map(len, batch))] if tokens is not None else chunk)
            if len(batch) >= CHUNKS_PER_SHARD or (tokens is not None and done + sum(map(len, batch)) >= tokens):
                break
        batch = [c for c in batch if c]
        if not batch:
            break
        done += ensure(shard_path(folder, "code", "train", index), lambda: text_shard(pair, recipe, batch), "code")
        bar(sum(map(len, batch)))
    return done
