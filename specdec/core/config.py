"""Frozen settings: how to generate (the model pairs the project knows by name: specdec/models/presets.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdec.core.variant_names import DENSE, canonical, parse_kernel, variant_parts

MAX_K = 32  # longest draft the engine accepts
MAX_NEW_TOKENS_CAP = 2048  # longest generation the engine accepts
DRAFTERS = ("model", "lookup", "head", "auto", "auto_head", "auto_both", "none")  # who drafts: specdec/core/proposers/
K_POLICIES = ("fixed", "adaptive", "cost")  # specdec/core/k_policy.py
RUNNERS = ("eager", "static", "compiled")  # how both models' passes run (specdec/core/runners/)


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 64  # stop after this many new tokens
    k: int = 5  # draft length (the starting length when adaptive)
    k_policy: str = "fixed"  # how K is chosen each step: fixed | adaptive | cost (K may be 0; specdec/core/k_policy.py)
    k_max: int = 16  # upper bound for adaptive K and for the cost policy's K
    draft_confidence: float = 0.0  # stop drafting once the draft's top probability falls below this; 0 = off
    temperature: float = 0.0  # 0 = greedy; otherwise rejection sampling at this temperature
    top_k: int = 0  # keep only the k most likely tokens; 0 = off
    top_p: float = 1.0  # keep the smallest set whose probability reaches top_p; 1 = off
    seed: int = 0  # seeds the one random generator of a run (never reseeded inside the loop)
    drafter: str = "model"  # model: the draft model; lookup: prompt n-grams; head: a layer on the target's features; auto: lookup, else model; auto_head: lookup, else head; auto_both: lookup, else the head or the draft model, whichever the cost K policy prices faster; none: plain
    lookup_ngram: int = 3  # longest n-gram prompt lookup tries to match (it falls back to shorter ones)
    draft_variant: str = DENSE  # the draft as run: dense (as loaded) | int8 | int4 | w8a8 | w4a8, optionally -v16k / -v32k (specdec/core/variant_names.py)
    target_kernel: str = DENSE  # the target as run: dense (as loaded) | int8 | q4k | w8a8 | w4a8 (specdec/core/variant_names.py)
    runner: str = "eager"  # eager: transformers as is, growing cache | static: preallocated cache, fixed shapes | compiled: static, captured

    def __post_init__(self):
        # an old name (`bf16`, `bf16-v32k`) is read as today's (`dense`, `dense-v32k`), so old callers work
        object.__setattr__(self, "draft_variant", canonical(self.draft_variant))
        object.__setattr__(self, "target_kernel", canonical(self.target_kernel))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def drafts(self) -> bool:
        """Something drafts (else this is plain decoding: one token per target pass)."""
        return self.drafter != "none"

    @property
    def uses_draft_model(self) -> bool:
        """The draft model drafts some steps (it is built, loaded and run)."""
        return self.drafter in ("model", "auto", "auto_both")

    @property
    def uses_lookup(self) -> bool:
        """Prompt lookup drafts some steps (all of them with "lookup"; where it matches with the auto drafters)."""
        return self.drafter in ("lookup", "auto", "auto_head", "auto_both")

    @property
    def uses_head(self) -> bool:
        """The trained head drafts (every step with "head"; where lookup has nothing with "auto_head", and
        there where the cost K policy prices it faster than the draft model with "auto_both"). It reads
        the target's features (specdec/core/proposers/head.py), so it settles after every step either way."""
        return self.drafter in ("head", "auto_head", "auto_both")

    @property
    def needs_cost_table(self) -> bool:
        """The cost K policy runs, and reads a cost table measured before the run."""
        return self.k_policy == "cost" and self.drafts

    def validate(self) -> "GenerationConfig":
        """Raise ValueError naming the first field outside its allowed range; return self."""
        _check_int("k", self.k, 1, MAX_K)
        _check_int("k_max", self.k_max, 1, MAX_K)
        _check_int("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS_CAP)
        _check_int("top_k", self.top_k, 0, None)
        _check_int("seed", self.seed, 0, None)
        _check_int("lookup_ngram", self.lookup_ngram, 1, 16)
        if not _is_number(self.temperature) or self.temperature < 0 or not math.isfinite(self.temperature):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not _is_number(self.draft_confidence) or not 0 <= self.draft_confidence < 1:
            raise ValueError(f"draft_confidence must be in [0, 1), got {self.draft_confidence!r}")
        if self.k_policy not in K_POLICIES:
            raise ValueError(f"k_policy must be one of {', '.join(K_POLICIES)}, got {self.k_policy!r}")
        parse_runner(self.runner)
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}, got {self.drafter!r}")
        variant_parts(self.draft_variant)  # raises naming draft_variant and the allowed names
        parse_kernel(self.target_kernel)  # raises naming target_kernel and the allowed names
        return self


def parse_runner(name) -> str:
    """A runner's name, checked: ValueError naming the allowed ones otherwise."""
    if name not in RUNNERS:
        raise ValueError(f"runner must be one of {', '.join(RUNNERS)}, got {name!r}")
    return name


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_int(name: str, value, low: int, high: int | None) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not ok:
        allowed = f"in {low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")
