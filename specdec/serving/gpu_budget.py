"""How long one GPU call of the app may take, for ZeroGPU.

On a ZeroGPU Space every call to a `spaces.GPU` function asks for a duration up front (60 s unless
told otherwise); a call that runs past it may be aborted, and every second asked for counts
against the visitor's daily quota. So the app asks for the longest the run could take, computed
from the request, and refuses requests that could not finish within $SPECDEC_GPU_SECONDS.

The bound is a worst case, not a forecast: every step of a speculative run emits at least one
token and costs K draft passes plus one verify pass, so a run whose drafts are all rejected takes
max_new_tokens such steps; the plain run takes max_new_tokens decode passes. Per-pass costs start
from conservative estimates and are replaced by what the app measures on its own GPU.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specdec.core.config import GenerationConfig
from specdec.core.events import StepEvent

SECONDS_ENV = "SPECDEC_GPU_SECONDS"  # the longest GPU call the app asks ZeroGPU for
DEFAULT_SECONDS = 60  # ZeroGPU's own default duration
MARGIN = 1.5  # measured pass times are noisy and the first passes of a call are slower


def on_zero_gpu(environ=os.environ) -> bool:
    """The variable ZeroGPU sets, read the way the `spaces` package reads it."""
    return environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "t", "true")


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
    setup_s: float = 15.0  # once per call: attaching the GPU, moving the weights, the prompt's prefill

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
    if config.drafter in ("lookup", "none"):
        return 0
    return max(config.k, config.k_max) if config.policy != "fixed" else config.k


def call_seconds(config: GenerationConfig, compare: bool, costs: PassCosts) -> float:
    """The longest a run (and its plain comparison) can take on the GPU."""
    n = config.max_new_tokens
    if config.drafter == "none":
        spec = n * costs.decode_s
    else:
        spec = n * (draft_passes(config) * costs.draft_s + costs.verify_s)
    return costs.setup_s + spec + (n * costs.decode_s if compare else 0.0)


def max_new_tokens_within(seconds: float, config: GenerationConfig, compare: bool, costs: PassCosts) -> int:
    """The largest max_new_tokens whose worst case fits in `seconds` (0 when not even one token fits)."""
    per_token = call_seconds(replace(config, max_new_tokens=1), compare, costs) - costs.setup_s
    return max(0, math.floor((seconds - costs.setup_s) / per_token))


def check_fits(config: GenerationConfig, compare: bool, costs: PassCosts, seconds: float) -> None:
    """ValueError naming max_new_tokens when the run might outlast a GPU call of `seconds`."""
    need = call_seconds(config, compare, costs)
    if need <= seconds:
        return
    fit = max_new_tokens_within(seconds, config, compare, costs)
    settings = f"K={config.k}" + (" ({}, up to {})".format(config.policy, max(config.k, config.k_max)) if config.policy != "fixed" else "")
    settings += " and the plain comparison" if compare else ""
    raise ValueError(
        f"max_new_tokens={config.max_new_tokens} could need up to {need:.0f} s of GPU time with {settings}; "
        f"a GPU call here may last {seconds:.0f} s, so at most {fit} new tokens fit (more with a smaller K or without the comparison)"
    )


_costs: dict[str, PassCosts] = {}  # pair name -> costs measured in this process


def costs_for(pair_name: str) -> PassCosts:
    return _costs.get(pair_name, PassCosts())


def record(pair_name: str, config: GenerationConfig, spec: Sequence[StepEvent], plain: Sequence[StepEvent]) -> None:
    """Keep a finished run's pass times for the next request's duration (runs of a few steps say too little)."""
    if len(spec) >= 8:
        _costs[pair_name] = costs_for(pair_name).measured(config, spec, plain)

