"""The bench's settings of our engine per mode: fixed or adaptive K with the draft model, prompt
lookup, plain decoding, `best`, the policy chosen on the mixed prompt set, and the trained head
(`head`: K as `spec`'s; `best_head`: K from the cost table), and `page`: what the page starts on here."""

from __future__ import annotations

from dataclasses import replace

from specdec.core.config import MAX_K, GenerationConfig
from specdec.core.variant_names import DENSE
from specdec.kernels.machine_defaults import MachineDefaults

LOOKUP_NGRAM = 3  # longest n-gram prompt lookup matches, ours and transformers' alike


def split_mode(mode: str) -> tuple[str, str | None]:
    """"spec@int4-v32k" -> ("spec", "int4-v32k"); "plain" -> ("plain", None)."""
    base, _, variant = mode.partition("@")
    return base, variant or None


def mode_config(mode: str, k: int, max_new_tokens: int, schedule: str, variant: str = DENSE,
                k_policy: str | None = None, start: MachineDefaults | None = None) -> GenerationConfig:
    """Our engine's settings for a mode. `schedule` applies to `spec` and, on the HF side, to
    `hf_assisted`: constant = fixed K; heuristic = +2 after a fully accepted draft, -1 otherwise.
    `k_policy`, when given, is `spec`'s K policy instead (specdec/core/k_policy.py: fixed, adaptive, cost).
    `variant` is the draft variant of the draft-model modes; a mode may name its own (`spec@int4`).
    `start` is what the page starts on here, which `page` runs (required for it)."""
    mode, own = split_mode(mode)
    base = GenerationConfig(max_new_tokens=max_new_tokens, k=k, temperature=0.0, lookup_ngram=LOOKUP_NGRAM,
                            draft_variant=own or variant)
    if mode in ("plain", "plain_int4"):
        return replace(base, drafter="none", draft_variant=DENSE)
    if mode == "spec":
        policy = k_policy or ("adaptive" if schedule == "heuristic" else "fixed")
        return replace(base, drafter="model", k_policy=policy, k_max=MAX_K)
    if mode == "lookup":
        return replace(base, drafter="lookup", draft_variant=DENSE)
    if mode == "best":
        return best_config(base)
    if mode == "head":
        policy = k_policy or ("adaptive" if schedule == "heuristic" else "fixed")
        return replace(base, drafter="head", k_policy=policy, k_max=MAX_K, draft_variant=DENSE)
    if mode == "best_head":
        return best_head_config(base)
    if mode == "best_both":
        return best_both_config(base)
    if mode == "page":
        if start is None:
            raise ValueError("the page mode needs what the page starts on (start_defaults)")
        return page_config(base, start)
    raise ValueError(f"{mode!r} is not one of our modes")


def best_config(base: GenerationConfig) -> GenerationConfig:
    """Our best policy on the mixed prompt set (docs/benchmarks.md, "How best was chosen"): prompt
    lookup on matches of 2 tokens or more (free, long accepted runs on edits), the draft model
    otherwise; K chosen each step from this machine's pass costs and the acceptance so far, within
    0..8 (0: a plain step where drafting would not pay; specdec/core/k_policy.py); the draft stops
    early when unsure (a rejected draft token costs a draft pass for nothing)."""
    return replace(base, drafter="auto", k_policy="cost", k_max=8, draft_confidence=0.4)


def best_head_config(base: GenerationConfig) -> GenerationConfig:
    """best with the head in the draft model's place: prompt lookup on matches of 2 tokens or more,
    the head otherwise (`auto_head`), K from the cost table (the head's own measured step as its
    draft cost: the table's head_s, specdec.measure.cost_table) within 0..8."""
    return replace(base, drafter="auto_head", k_policy="cost", k_max=8, draft_variant=DENSE)


def best_both_config(base: GenerationConfig) -> GenerationConfig:
    """best_head with the draft model standing by (`auto_both`): prompt lookup on a match, else the
    head or the draft model, whichever the cost K policy prices faster this step, K within 0..8; the
    draft model stops early when unsure, as in best."""
    return replace(best_head_config(base), drafter="auto_both", draft_variant=base.draft_variant, draft_confidence=0.4)


def page_config(base: GenerationConfig, start: MachineDefaults) -> GenerationConfig:
    """What the page and `generate` run here when nothing is named: the start's drafter, draft variant
    and K policy, with GenerationConfig's own K bounds, as `generate` builds it (specdec/cli/args.py
    generation_config); the target kernel and runner are the bench lane's."""
    return replace(base, drafter=start.drafter, draft_variant=start.draft_variant, k_policy=start.k_policy)


def best_description() -> str:
    b = best_config(GenerationConfig())
    return f"drafter={b.drafter}, k_policy={b.k_policy}, k_max={b.k_max}, draft_confidence={b.draft_confidence}"
