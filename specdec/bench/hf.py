"""transformers' own speculative loops, run beside ours on the same models: assisted generation
with the draft model, and prompt lookup; the forward passes counted with hooks."""

from __future__ import annotations

import contextlib
import time

import torch

from specdec.bench.policies import LOOKUP_NGRAM
from specdec.kernels.cpu_linear import CpuLinear
from specdec.models.pair import ModelPair


class PassCounter:
    """Counts forward calls of a model (a forward pre-hook: no effect on the computation)."""

    def __init__(self, model):
        self.calls = 0
        self._handle = model.register_forward_pre_hook(self._count)

    def _count(self, *_):
        self.calls += 1

    def remove(self):
        self._handle.remove()


@contextlib.contextmanager
def assistant_settings(draft, **values):
    """transformers reads the assistant's schedule from the assistant model's own generation_config,
    not from generate()'s arguments; set it for one call and put the old values back."""
    gc = draft.generation_config
    old = {name: getattr(gc, name, None) for name in values}
    for name, value in values.items():
        setattr(gc, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(gc, name, value)


@contextlib.contextmanager
def quiet_transformers():
    """transformers warns on every assisted call about how it calls itself; keep stderr readable."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def run_hf(pair: ModelPair, prompt_ids: list[int], mode: str, k: int, max_new_tokens: int, schedule: str) -> dict:
    """transformers' generate, greedy, with the engine's end-of-sequence ids and length limits."""
    ids = torch.tensor([prompt_ids], device=pair.device)
    eos = sorted(pair.eos_ids)
    common = dict(
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        eos_token_id=eos or None,
        pad_token_id=eos[0] if eos else 0,
        repetition_penalty=1.0,  # a model's generation_config may set sampling extras; greedy means none
        temperature=None,
        top_p=None,
        top_k=None,
    )
    kernels = CpuLinear() if mode.endswith("_cpulinear") and pair.device.type == "cpu" else contextlib.nullcontext()
    base = mode.removesuffix("_cpulinear")
    if base == "hf_assisted":
        # Same K and schedule as our `spec`; transformers' confidence early stop (default 0.4) is
        # switched off because `spec` has none (`best` is where ours uses one).
        settings = assistant_settings(
            pair.draft,
            num_assistant_tokens=k,
            num_assistant_tokens_schedule="constant" if schedule == "constant" else "heuristic_transient",
            assistant_confidence_threshold=0.0,
        )
        extra = dict(assistant_model=pair.draft)
    elif base == "hf_lookup":
        settings = contextlib.nullcontext()
        extra = dict(prompt_lookup_num_tokens=k, max_matching_ngram_size=LOOKUP_NGRAM)
    else:
        raise ValueError(f"{mode!r} is not a transformers mode")
    target_calls = PassCounter(pair.target)
    draft_calls = PassCounter(pair.draft) if base == "hf_assisted" else None
    try:
        with kernels, settings, quiet_transformers():
            start = time.perf_counter()
            out = pair.target.generate(ids, **extra, **common)
            seconds = time.perf_counter() - start
    finally:
        target_calls.remove()
        if draft_calls:
            draft_calls.remove()
    new = out[0, len(prompt_ids) :].tolist()
    # Each target pass emits its matched candidates + 1 token, so tokens - passes were accepted
    # drafts; each assistant forward drafts one token. Prompt lookup's drafts are not countable.
    acceptance = (len(new) - target_calls.calls) / draft_calls.calls if draft_calls and draft_calls.calls else None
    return {"ids": new, "seconds": seconds, "accepted_share": acceptance, "target_passes": target_calls.calls, "mean_k": None}
