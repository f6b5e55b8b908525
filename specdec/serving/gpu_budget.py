"""How long one GPU call of the app may take, for ZeroGPU.

On a ZeroGPU Space every call to a `spaces.GPU` function asks for a duration up front (60 s unless
told otherwise); a call that runs past it may be aborted, and every second asked for counts
against the visitor's daily quota. So the app asks for the longest the run could take, computed
from the request, and refuses requests that could not finish within $SPECDEC_GPU_SECONDS.

The bound is a worst case, not a forecast: every step of a speculative run emits at least one
token and costs K draft passes plus one verify pass, so a run whose drafts are all rejected takes
max_new_tokens such steps; the plain run takes max_new_tokens decode passes. Per-pass costs start
from conservative estimates and are replaced by what the app measures on its own GPU, kept apart
for each (pair, target kernel, draft variant, runner): a fast bf16 run says nothing of a slower
kernel. Each call also pays once for what a fresh GPU worker has to do: move the weights onto the
card (grows with the pair), and the runner's own setup (a static cache allocated, CUDA graphs
captured). A call may get a worker that kept both from an earlier call (`spaces` reuses one when
its scheduler says the card is idle: docs/deploy.md), but nothing tells the app beforehand, so the
duration always counts them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specdec.core.config import GenerationConfig
from specdec.core.events import StepEvent
from specdec.models import machine
from specdec.models.presets import PRESETS

SECONDS_ENV = "SPECDEC_GPU_SECONDS"  # the longest GPU call the app asks ZeroGPU for
SIZE_ENV = "SPECDEC_GPU_SIZE"  # large (half a card, the default) or xlarge (the whole card; each second counts twice)
CARD_SHARE = {"large": 0.5, "xlarge": 1.0}  # of the card `spaces` reports in the app's process
DEFAULT_SECONDS = 60  # ZeroGPU's own default duration
MARGIN = 1.5  # measured pass times are noisy and the first passes of a call are slower
SETUP_S = 15.0  # once per call: attaching the GPU, the prompt's prefill, the first passes' warm-up
MOVE_BYTES_PER_S = 2e9  # the worker copies the pair's weights onto the card at its first call (an estimate)
# A fresh worker's first call, a runner's own setup: nothing for eager; the caches allocated for a
# static runner; the fixed shapes captured as CUDA graphs for a compiled one (draft passes, verify
# buckets, plain decode, each after warm-up passes). Source: none measured yet. scripts/gpu_check/
# records each shape's capture seconds on a GPU and prints `first_call_capture_s`, MARGIN x what a
# default run's shapes took: the figure that replaces "compiled" here once a GPU record exists
# (docs/benchmarks.md, "The GPU check"). Until then an estimate meant to be high.
CAPTURE_ESTIMATES = {"eager": 0.0, "static": 2.0, "compiled": 30.0}


def on_zero_gpu(environ=os.environ) -> bool:
    """The variable ZeroGPU sets, read the way the `spaces` package reads it."""
    return machine.zero_gpu(environ)


def gpu_size(environ=os.environ) -> str | None:
    """$SPECDEC_GPU_SIZE (None when unset: `spaces` then takes large, or xlarge when the weights
    placed at start-up exceed its threshold); ValueError naming the variable for anything else."""
    raw = environ.get(SIZE_ENV, "").strip()
    if raw and raw not in CARD_SHARE:
        raise ValueError(f"{SIZE_ENV} must be one of {', '.join(CARD_SHARE)}, got {raw!r}")
    return raw or None


def card_share(environ=os.environ) -> float:
    """The share of the card one GPU call gets: half unless xlarge is asked for."""
    return CARD_SHARE[gpu_size(environ) or "large"]


@dataclass(frozen=True)
class CostKey:
    """What a run's pass costs depend on: the pair, the target's kernel, the draft's variant ("-"
    when no draft model runs) and the runner."""

    pair: str
    kernel: str
    variant: str
    runner: str


def cost_key(pair_name: str, config: GenerationConfig) -> CostKey:
    variant = config.draft_variant if config.uses_draft_model else "-"
    return CostKey(pair_name, config.target_kernel, variant, config.runner)


def setup_estimate(pair_name: str) -> float:
    """SETUP_S plus the time to move the pair's bf16 weights onto the card."""
    preset = PRESETS.get(pair_name)
    weight_bytes = preset.params_b * 1e9 * 2 if preset is not None else 0.0
    return SETUP_S + weight_bytes / MOVE_BYTES_PER_S


def call_limit(environ=os.environ) -> int:
    """$SPECDEC_GPU_SECONDS (default 60); ValueError naming the variable for anything but a positive integer."""
    raw = environ.get(SECONDS_ENV, "").strip()
    if not raw:
        return DEFAULT_SECONDS
    if not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"{SECONDS_ENV} must be a positive number of seconds, got {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class PassCosts:
    """Seconds per forward pass on the GPU. The defaults are estimates for models up to 8 B
    parameters on one GPU slice in eager PyTorch, where a pass costs a few tens of milliseconds of
    kernel launches and Python whatever the size; they are meant to be high."""

    draft_s: float = 0.030  # one draft-model pass over one token
    verify_s: float = 0.050  # one target pass over K+1 drafted positions
    decode_s: float = 0.045  # one plain target pass over one token
    setup_s: float = SETUP_S  # once per call: attaching the GPU, moving the weights, the prompt's prefill
    capture_s: float = 0.0  # once per call: the runner's setup (caches allocated, graphs captured)
    # Once, where the cost K policy runs: its cost table (8 target pass sizes x 3 repeats and the
    # draft's, at 200 cached positions) is measured inside the call unless one is on disk already.
    table_s: float = 10.0

    def once_s(self, config: GenerationConfig) -> float:
        """What a call of `config` pays once, whatever its length."""
        table = self.table_s if config.needs_cost_table else 0.0
        return self.setup_s + self.capture_s + table

    def measured(self, config: GenerationConfig, spec: Sequence[StepEvent], plain: Sequence[StepEvent]) -> "PassCosts":
        """These costs with the pass times of a finished run in their place (90th percentile x MARGIN)."""
        def high(values):
            values = sorted(values)
            return MARGIN * values[min(len(values) - 1, int(0.9 * len(values)))] if values else None

        model_only = config.drafter == "model"  # lookup drafts cost nothing, so they would pull the figure down
        draft = high([e.draft_s / len(e.drafted) for e in spec if model_only and e.drafted]) if spec else None
        verify = high([e.verify_s for e in spec if e.drafted])
        decode = high([e.verify_s for e in plain])
        return replace(self, draft_s=draft or self.draft_s, verify_s=verify or self.verify_s, decode_s=decode or self.decode_s)


def draft_passes(config: GenerationConfig) -> int:
    """Most draft-model passes one step can make."""
    if not config.uses_draft_model:
        return 0
    return max(config.k, config.k_max) if config.k_policy != "fixed" else config.k


def call_seconds(config: GenerationConfig, compare: bool, costs: PassCosts) -> float:
    """The longest a run (and its plain comparison) can take on the GPU."""
    n = config.max_new_tokens
    if not config.drafts:
        spec = n * costs.decode_s
    else:
        spec = n * (draft_passes(config) * costs.draft_s + costs.verify_s)
    return costs.once_s(config) + spec + (n * costs.decode_s if compare else 0.0)


def max_new_tokens_within(seconds: float, config: GenerationConfig, compare: bool, costs: PassCosts) -> int:
    """The largest max_new_tokens whose worst case fits in `seconds` (0 when not even one token fits)."""
    per_token = call_seconds(replace(config, max_new_tokens=1), compare, costs) - costs.once_s(config)
    return max(0, math.floor((seconds - costs.once_s(config)) / per_token))


def check_fits(config: GenerationConfig, compare: bool, costs: PassCosts, seconds: float) -> None:
    """ValueError naming max_new_tokens when the run might outlast a GPU call of `seconds`."""
    need = call_seconds(config, compare, costs)
    if need <= seconds:
        return
    fit = max_new_tokens_within(seconds, config, compare, costs)
    settings = f"K={config.k}" + (" ({}, up to {})".format(config.k_policy, max(config.k, config.k_max)) if config.k_policy != "fixed" else "")
    settings += " and the plain comparison" if compare else ""
    raise ValueError(
        f"max_new_tokens={config.max_new_tokens} could need up to {need:.0f} s of GPU time with {settings}; "
        f"a GPU call here may last {seconds:.0f} s, so at most {fit} new tokens fit (more with a smaller K or without the comparison)"
    )


_costs: dict[CostKey, PassCosts] = {}  # pass costs measured in this process
_captures: dict[CostKey, float] = {}  # runner setup seconds per call (with MARGIN), from reported captures
_fresh_measured: set[CostKey] = set()  # keys whose starting estimate a fresh worker's capture has replaced


@dataclass(frozen=True)
class CaptureReport:
    """What one GPU call says about its runner's setup (its last item, app/gpu_call.py)."""

    seconds: float  # what the call's runs spent capturing passes
    fresh: bool  # the call was its process's first (a new ZeroGPU worker): every shape its runs needed was captured in it


def capture_figure(key: CostKey) -> float:
    """The runner's setup a call of `key` is budgeted with: reported where a call reported one,
    else the starting estimate (CAPTURE_ESTIMATES)."""
    return _captures.get(key, CAPTURE_ESTIMATES.get(key.runner, max(CAPTURE_ESTIMATES.values())))


def costs_for(key: CostKey) -> PassCosts:
    """The costs a request of `key` is budgeted with: measured ones where a run of that key has
    finished here, else the estimates; the runner's setup as capture_figure says."""
    costs = _costs.get(key) or PassCosts(setup_s=setup_estimate(key.pair))
    return replace(costs, capture_s=capture_figure(key))


def record(key: CostKey, config: GenerationConfig, spec: Sequence[StepEvent], plain: Sequence[StepEvent]) -> None:
    """Keep a finished run's pass times for the next request of the same key (runs of a few steps say too little)."""
    if len(spec) >= 8:
        _costs[key] = costs_for(key).measured(config, spec, plain)


def record_capture(key: CostKey, report: CaptureReport) -> None:
    """Count what one call of `key` spent capturing (MARGIN x its seconds) in later durations. The
    figure only grows: a call in a reused worker captures only what that worker lacked (often
    nothing: 0 s), and the next call may land in a fresh worker that captures everything again. One
    exception: the first capture measured in a fresh worker replaces the starting estimate, which
    was a guess; after it the figure grows again only (a later run with a larger K captures more)."""
    if not report.seconds >= 0:  # NaN too
        raise ValueError(f"capture seconds must be a number >= 0, got {report.seconds!r}")
    figure = MARGIN * report.seconds
    if report.fresh and key not in _fresh_measured:
        _fresh_measured.add(key)
        _captures[key] = figure
    else:
        _captures[key] = max(figure, capture_figure(key))
