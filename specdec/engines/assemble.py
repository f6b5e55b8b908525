"""Our engine, assembled: a run's target kernel, draft variant, F.linear rerouting, runner and cost
table are chosen and built here, then handed to the core loop (specdec.core.decoding) as its
RunParts. The loop itself builds nothing, so it imports nothing above the core.

`build_decoding` is the one way a run of our engine starts (specdec.engines.ours.OurSource, the
page, the bench and the command line all come through it). `prepare` is the one place that builds
or measures what a run needs (kept on the pair, specdec.models.built, and in the cost table's
cache), before the run's clock starts, so a caller that times runs can call it first; `run_parts`
takes what it prepared and lends it to the run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from pathlib import Path

from torch import nn

from specdec.core.config import GenerationConfig
from specdec.core.decoding import Decoding
from specdec.core.proposers.head import HeadSource
from specdec.core.run_parts import RunParts
from specdec.core.runners import runner_model
from specdec.core.runners.recording import RecordingRunner
from specdec.core.runners.runner import Runner
from specdec.kernels.cpu_linear import linear_for
from specdec.kernels.head_offer import drafting_ids, head_run, head_weights, require_head, subset_lm_head, validation_prior
from specdec.kernels.target_kernels import kernel_target
from specdec.kernels.variants import draft_model
from specdec.measure.cost_table import costs_for, head_cost_for, with_head
from specdec.measure.passcost import PassCosts
from specdec.measure.stream_rate import streamed_bytes
from specdec.models.pair import ModelPair


def build_decoding(pair: ModelPair, prompt_ids: list[int], config: GenerationConfig, *, detailed: bool = False,
                   stop: threading.Event | None = None, costs: PassCosts | None = None) -> Decoding:
    """A run of `config` over prompt ids already templated and encoded. The settings are checked
    here and nowhere else on a run's way in (ValueError names a bad one), then whether the prompt
    leaves room for the run in the model's context. detailed: record what the step panel shows of
    each step (the run's `details`); such a run runs eager whatever config.runner says. costs: the
    cost table the cost K policy reads (default: specdec.measure.cost_table's, cached or measured
    here, before the run's clock)."""
    config.validate()
    pair.check_room(prompt_ids, config.max_new_tokens)
    if config.uses_draft_model and pair.draft is None:
        raise ValueError(f"drafter {config.drafter!r} needs a draft model, and pair {pair.name!r} has none")
    if config.uses_head:
        require_head(pair, config.drafter)
    if detailed:
        config = replace(config, runner="eager")
    parts = run_parts(pair, config, costs, RecordingRunner if detailed else Runner)
    return Decoding(parts, prompt_ids, config, stop)


@dataclass(frozen=True)
class Prepared:
    """What a run of one config runs, as prepare built it."""

    target: nn.Module  # the target as its kernel runs it
    draft: nn.Module | None  # the draft model as its variant (None: no draft model drafts)
    head: HeadSource | None  # the trained head (None: the head does not draft)
    costs: PassCosts | None  # the cost table the cost K policy reads (None where no cost policy runs)


def prepare(pair: ModelPair, config: GenerationConfig, progress: bool = False) -> Prepared:
    """Build (or load) what a run of `config` needs before its clock starts: the target kernel, the
    draft variant, the head and the cost table (with the head's step when the head drafts), each
    kept for later runs (the pair's store, specdec.models.built; the cost table's cache), so asking
    again only looks them up. progress: show a bar while a cost table is measured."""
    return _prepare(pair, config, None, progress)


def _prepare(pair: ModelPair, config: GenerationConfig, costs: PassCosts | None, progress: bool = False) -> Prepared:
    """prepare, with the caller's own cost table where it gives one (costs)."""
    head = head_source(pair, config.target_kernel) if config.uses_head else None  # first: a pair without a head builds nothing
    target = kernel_target(pair, config.target_kernel)  # built once per pair and kernel
    draft = draft_model(pair, config.draft_variant) if config.uses_draft_model else None  # built once per pair and variant
    if config.needs_cost_table and costs is None:
        costs = costs_for(pair, config, target=target, progress=progress, head=head)  # read, or measured on this very target
    elif head is not None and costs is not None and costs.head_s is None:
        streamed = costs.streamed_bytes or streamed_bytes(target)  # what the target's pass before a first draft reads
        costs = with_head(costs, head_cost_for(pair, config, head, streamed))  # a caller's table: this machine's head drafts
    return Prepared(target, draft, head, costs)


def run_parts(pair: ModelPair, config: GenerationConfig, costs: PassCosts | None = None,
              runner: type[Runner] = Runner) -> RunParts:
    """The parts of a run of these settings: what prepare built (built now where it was not), each
    model lent to the run with an empty cache of its own (a compiled model's is the process's, lent
    to one run at a time: specdec.core.runners.capture). costs: the caller's cost table (default: the pair's)."""
    built = _prepare(pair, config, costs)
    target = runner_model(config.runner, built.target, pair.vocab_size, linear_for(built.target))
    draft = None if built.draft is None else runner_model(config.runner, built.draft, pair.vocab_size, linear_for(built.draft))
    return RunParts(target=target, draft=draft, costs=built.costs, device=pair.device, eos_ids=pair.eos_ids,
                    tokenizer=pair.tokenizer, runner=runner, head=built.head)


def head_kernel(target_kernel: str) -> str:
    """How the head's products run: on the w8a8 kernel beside a w8a8 or w4a8 target (the same int8
    activations as the target's layers, and the kernel library is there; a head step measured 4.8 ms
    on w8a8 against 8.8 ms dense on a 2-core AMD EPYC), dense in the pair's dtype beside every other
    target kernel."""
    return "w8a8" if target_kernel in ("w8a8", "w4a8") else "dense"


def head_source(pair: ModelPair, target_kernel: str) -> HeadSource:
    """The pair's verified head (head_offer.require_head), built once per file and kernel: each run
    makes a HeadRun of its own (its KV cache) over the built weights and the target's lm_head rows
    of the head's vocabulary. ValueError with find_head's reason when the pair has none."""
    stored = require_head(pair)
    kernel = head_kernel(target_kernel)
    key = (str(stored.path), stored.digest, kernel)
    heads = pair.built.heads
    if key not in heads:
        weights = head_weights(pair, stored, kernel)
        # The head drafts from its file's vocabulary (counted from its training data), else the
        # HEAD_VOCAB most frequent tokens of the shipped list, as it was judged in training; a
        # target with no more rows than those keeps its own lm_head (head_run's default).
        ids = drafting_ids(pair, stored)
        rows = None if ids is None else subset_lm_head(pair, ids, kernel)
        heads[key] = HeadSource(lambda: head_run(pair, weights, rows), pair.vocab_size, Path(stored.path).name, stored.digest,
                                validation_prior(stored.record))
    return heads[key]
