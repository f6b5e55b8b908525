"""Our engine, assembled: a run's target kernel, draft variant, F.linear rerouting, runner and cost
table are chosen and built here, then handed to the core loop (specdec.core.decoding) as its
RunParts. The loop itself builds nothing, so it imports nothing above the core.

`build_decoding` is the one way a run of our engine starts (specdec.engines.ours.OurSource, the
page, the bench and the command line all come through it); `prepare` builds what a run needs
before its clock starts, so a caller that times runs can call it first.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from specdec.core.config import GenerationConfig
from specdec.core.decoding import Decoding
from specdec.core.run_parts import RunParts
from specdec.core.runners import runner_model
from specdec.core.runners.recording import RecordingRunner
from specdec.core.runners.runner import Runner
from specdec.kernels.cpu_linear import linear_for
from specdec.kernels.target_kernels import kernel_target
from specdec.kernels.variants import draft_model
from specdec.measure.cost_table import costs_for
from specdec.measure.passcost import PassCosts
from specdec.models.pair import ModelPair


def build_decoding(pair: ModelPair, prompt_ids: list[int], config: GenerationConfig, *, detailed: bool = False,
                   stop: threading.Event | None = None, costs: PassCosts | None = None) -> Decoding:
    """A run of `config` over prompt ids already templated and encoded, validated first (ValueError
    names a bad setting). detailed: record what the step panel shows of each step (the run's
    `details`); such a run runs eager whatever config.runner says. costs: the cost table the cost K
    policy reads (default: specdec.measure.cost_table's, cached or measured here, before the run's clock)."""
    config.validate()
    if config.uses_draft_model and pair.draft is None:
        raise ValueError(f"drafter {config.drafter!r} needs a draft model, and pair {pair.name!r} has none")
    if detailed:
        config = replace(config, runner="eager")
    parts = run_parts(pair, config, costs, RecordingRunner if detailed else Runner)
    return Decoding(parts, prompt_ids, config, stop)


def prepare(pair: ModelPair, config: GenerationConfig, progress: bool = False) -> None:
    """Build (or load) what a run of `config` needs before its clock starts: the target kernel, the
    draft variant and the cost table, each kept for later runs. progress: show a bar while a cost
    table is measured."""
    kernel_target(pair, config.target_kernel)
    if config.uses_draft_model:
        draft_model(pair, config.draft_variant)
    if config.needs_cost_table:
        costs_for(pair, config, progress=progress)


def run_parts(pair: ModelPair, config: GenerationConfig, costs: PassCosts | None = None,
              runner: type[Runner] = Runner) -> RunParts:
    """Everything a run of these settings needs, built (or taken from the pair's store) now, before
    the run's clock starts. Each model is lent to the run with an empty cache of its own (a compiled
    model's is the process's, lent to one run at a time: specdec.core.runners.capture)."""
    target_module = kernel_target(pair, config.target_kernel)  # built once per pair and kernel
    target = runner_model(config.runner, target_module, pair.vocab_size, linear_for(target_module))
    if config.needs_cost_table and costs is None:
        costs = costs_for(pair, config, target=target_module)  # read, or measured on this very target
    draft = None
    if config.uses_draft_model:
        draft_module = draft_model(pair, config.draft_variant)  # built once per pair and variant
        draft = runner_model(config.runner, draft_module, pair.vocab_size, linear_for(draft_module))
    return RunParts(target=target, draft=draft, costs=costs, device=pair.device, eos_ids=pair.eos_ids,
                    tokenizer=pair.tokenizer, runner=runner)
