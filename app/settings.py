"""The page's settings, read and checked: the controls' values (as sent, unprocessed by Gradio, so a
bad value sent through the API is caught here) -> a GenerationConfig, and what else a request was
asked for, checked against the handler that reads it (app/request.py runs these checks for every
handler). ValueError names the first field that is wrong."""

from __future__ import annotations

from dataclasses import dataclass

from specdec.core.config import GenerationConfig
from specdec.engines import choice
from specdec.engines.base import Capabilities
from specdec.kernels import device_offer
from specdec.models.pair import pick_device
from specdec.serving import gpu_budget

from . import engine_choice


def _int(value):
    """Number boxes send floats; keep non-integers as they are so validation names the field."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def _within(name: str, value, component, integer: bool = False) -> None:
    """The page's own range (narrower than the engine's), for values sent through the API."""
    low, high = component.minimum, component.maximum
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not low <= value <= high or (integer and not float(value).is_integer()):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{name} must be {kind} in {low:g}..{high:g} on this page, got {value!r}")


def read_config(page, values: dict) -> GenerationConfig:
    """The run's settings from the controls; ValueError names the first field that is wrong."""
    for name, component, integer in (("k", page.k, True), ("max_new_tokens", page.max_new, True),
                                     ("temperature", page.temperature, False), ("top_p", page.top_p, False)):
        _within(name, values[component], component, integer)
    adaptive, cost = _flag("k_policy adaptive", values[page.adaptive]), _flag("k_policy cost", values[page.cost_k])
    config = GenerationConfig(
        max_new_tokens=_int(values[page.max_new]), k=_int(values[page.k]),
        k_policy="adaptive" if adaptive else "cost" if cost else "fixed", temperature=values[page.temperature],
        top_k=_int(values[page.top_k]), top_p=values[page.top_p], seed=_int(values[page.seed]),
        drafter=values[page.drafter], draft_variant=values[page.draft_variant], target_kernel=values[page.target_kernel],
        runner=values[page.runner],
    ).validate()
    if adaptive and cost:  # two checkboxes for one choice: the page cannot tell which was meant
        raise ValueError("k_policy adaptive and k_policy cost exclude each other: choose one k_policy")
    return config


@dataclass(frozen=True)
class Handler:
    """A handler that runs a model, as the request checks see it (app/request.py)."""

    name: str  # as a refusal names it
    needs: str | None = None  # a Capabilities field the chosen engine must have (None: any engine)
    here_only: bool = False  # it runs the models in this process (a held run, a sweep), where ZeroGPU runs GPU work in a worker per call


GENERATE = Handler("Generate")
STEP = Handler("Step and Run to end", needs="steps_through", here_only=True)
SWEEP = Handler("Sweep K", needs="sweeps_k", here_only=True)


@dataclass(frozen=True)
class LiveSettings:
    """What a request was asked for, checked (read_live_settings)."""

    config: GenerationConfig
    compare: bool
    show_rejected: bool
    plain_int4: bool
    pair_name: str
    engine: str
    spec_url: str
    plain_url: str
    can: Capabilities  # what the chosen engine can do


def read_live_settings(page, values: dict, store, handler: Handler = GENERATE) -> LiveSettings:
    """The request's settings from the controls, in the order every handler checks them: the values,
    what the chosen engine can do, the pair offered here, the variant, kernel and lane offered on this
    device, and on ZeroGPU the time one call may take. ValueError names the first that is wrong."""
    config = read_config(page, values)
    compare = _flag("compare", values[page.compare])
    show_rejected = _flag("show_rejected", values[page.show_rejected])
    plain_int4 = _flag("plain_int4", values[page.plain_int4])
    engine = choice.check(values[page.engine])
    can = choice.capabilities(engine)
    if handler.needs and not getattr(can, handler.needs):
        raise ValueError(f"{handler.name} runs on this project's engine only (a remote engine reports no per-token detail): "
                         "choose it under Engine")
    if handler.here_only and gpu_budget.on_zero_gpu():
        raise ValueError(f"{handler.name} is off on ZeroGPU: it runs the models in this process, and GPU work there runs in a worker per call")
    engine, spec_url, plain_url = engine_choice.read_remote(page, values)
    if not can.follows_settings and config.temperature != 0:
        raise ValueError(f"temperature must be 0 for a remote engine (greedy runs only), got {config.temperature}")
    name = store.check_offered(values[page.pair])
    check_offered_here(config, plain_int4)
    if gpu_budget.on_zero_gpu():
        gpu_budget.check_fits(config, compare, gpu_budget.costs_for(gpu_budget.cost_key(name, config)), gpu_budget.call_limit())
    return LiveSettings(config, compare, show_rejected, plain_int4, name, engine, spec_url, plain_url, can)


def check_offered_here(config: GenerationConfig, plain_int4: bool) -> None:
    """ValueError naming the field when the run asks for a variant, kernel or lane this device is not
    offered (specdec.kernels.device_offer: on a GPU, what would re-expand its weights every pass)."""
    device = pick_device()
    if config.uses_draft_model:
        device_offer.draft_variants(device).check("draft_variant", config.draft_variant, device.type)
    device_offer.target_kernels(device).check("target_kernel", config.target_kernel, device.type)
    if plain_int4 and (why := device_offer.lossy_lane(device)):
        raise ValueError(f"plain_int4 is not offered on {device.type}: {why}")
