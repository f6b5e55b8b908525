"""Our engine, assembled: a run's target kernel, draft variant, F.linear rerouting and cost table
are chosen and built here, then handed to the core loop (specdec.core.decoding) as its RunParts.
The loop itself builds nothing, so it imports nothing above the core."""

from __future__ import annotations

import threading
from dataclasses import replace

from specdec.core.config import GenerationConfig
from specdec.core.decoding import Decoding
from specdec.core.detail import DetailedDecoding
from specdec.core.run_parts import RunParts
from specdec.core.runners.choice import runner_class, runner_model
from specdec.kernels.cpu_linear import linear_for
from specdec.kernels.target_kernels import kernel_target
from specdec.kernels.variants import draft_model
from specdec.measure.cost_table import costs_for
from specdec.measure.passcost import PassCosts
from specdec.models.pair import ModelPair


def generate(
    pair: ModelPair,
    prompt: str,
    config: GenerationConfig,
    *,
    chat: bool | None = None,
    stop: threading.Event | None = None,
    decoding: type[Decoding] | None = None,
    costs: PassCosts | None = None,
) -> Decoding:
    """Validate the input, then stream one StepEvent per target forward pass. `decoding`: the class
    that runs it, a Decoding that may look on without changing the events (specdec.core.detail's
    DetailedDecoding records what the step panel shows; generate_detailed below).
    costs: the cost table the cost K policy reads (default: specdec.measure.cost_table's, cached or
    measured here, before the run's clock starts)."""
    config.validate()
    prompt_ids = pair.encode_prompt(prompt, chat=pair.chat if chat is None else chat, max_new_tokens=config.max_new_tokens)
    if config.drafter in ("model", "auto") and pair.draft is None:
        raise ValueError(f"drafter 'model' needs a draft model, and pair {pair.name!r} has none")
    return build_decoding(pair, prompt_ids, config, stop=stop, decoding=decoding, costs=costs)


def generate_detailed(pair: ModelPair, prompt: str, config: GenerationConfig, **kwargs) -> DetailedDecoding:
    """generate, recording a StepDetail per step in the result's `details`. It runs eager whatever
    config.runner says: the recording looks on through the eager runner's verify hook."""
    return generate(pair, prompt, config, decoding=DetailedDecoding, **kwargs)


def build_decoding(pair: ModelPair, prompt_ids: list[int], config: GenerationConfig, *,
                   stop: threading.Event | None = None, decoding: type[Decoding] | None = None,
                   costs: PassCosts | None = None) -> Decoding:
    """A run over prompt ids already encoded (the bench encodes its prompts once): its parts, then the loop.
    A DetailedDecoding runs eager (generate_detailed)."""
    if decoding is not None and issubclass(decoding, DetailedDecoding):
        config = replace(config, runner="eager")
    return (decoding or Decoding)(run_parts(pair, config, costs), prompt_ids, config, stop)


def run_parts(pair: ModelPair, config: GenerationConfig, costs: PassCosts | None = None) -> RunParts:
    """Everything a run of these settings needs, built (or taken from the pair's store) now, before
    the run's clock starts. Each model gets a fresh, empty cache: the cache belongs to the run (a
    compiled model's is the process's, lent to one run at a time: specdec.core.runners.capture)."""
    target_module = kernel_target(pair, config.target_kernel)  # built once per pair and kernel
    target = runner_model(config.runner, target_module, pair.vocab_size, linear_for(target_module))
    if config.policy == "cost" and config.drafter != "none" and costs is None:
        costs = costs_for(pair, config, target=target_module)  # read, or measured on this very target
    draft = None
    if config.drafter in ("model", "auto"):
        draft_module = draft_model(pair, config.draft_variant)  # built once per pair and variant
        draft = runner_model(config.runner, draft_module, pair.vocab_size, linear_for(draft_module))
    return RunParts(target=target, draft=draft, costs=costs, device=pair.device, eos_ids=pair.eos_ids,
                    tokenizer=pair.tokenizer, runner=runner_class(config.runner))
