"""The page's settings, read and checked: the controls' values (as sent, unprocessed by Gradio, so a
bad value sent through the API is caught here) -> a GenerationConfig, and for a live run what else
it was asked for. ValueError names the first field that is wrong."""

from __future__ import annotations

from dataclasses import dataclass

from specdec.core.config import GenerationConfig
from specdec.engines import choice
from specdec.engines.base import Capabilities
from specdec.serving import gpu_budget

from . import engine_choice, gpu_call


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
class LiveSettings:
    """What a live run was asked for, checked (read_live_settings)."""

    config: GenerationConfig
    compare: bool
    show_rejected: bool
    plain_int4: bool
    pair_name: str
    engine: str
    spec_url: str
    plain_url: str
    can: Capabilities  # what the chosen engine can do


def read_live_settings(page, values: dict, store) -> LiveSettings:
    """The run's settings from the controls; ValueError names the first that is wrong, or one the
    chosen engine cannot honour."""
    config = read_config(page, values)
    compare = _flag("compare", values[page.compare])
    show_rejected = _flag("show_rejected", values[page.show_rejected])
    plain_int4 = _flag("plain_int4", values[page.plain_int4])
    name = store.check_offered(values[page.pair])
    engine, spec_url, plain_url = engine_choice.read_remote(page, values)
    can = choice.capabilities(engine)
    if not can.follows_settings and config.temperature != 0:
        raise ValueError(f"temperature must be 0 for a remote engine (greedy runs only), got {config.temperature}")
    gpu_call.check_offered_here(config, plain_int4)
    if gpu_budget.on_zero_gpu():
        gpu_budget.check_fits(config, compare, gpu_budget.costs_for(gpu_budget.cost_key(name, config)), gpu_budget.call_limit())
    return LiveSettings(config, compare, show_rejected, plain_int4, name, engine, spec_url, plain_url, can)
