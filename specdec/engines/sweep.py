"""Sweep K: really run the same prompt at several draft lengths, beside one plain run, and keep
every run's events (the measured points of the Theory tab's speedup-vs-K chart come from them).
Every run is this project's engine (OurSource)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from specdec.core.config import GenerationConfig
from specdec.engines.ours import OurSource
from specdec.measure.metrics import RunMetrics, measured_speedup, summarize, summarize_runs

SWEEP_KS = (1, 2, 3, 4, 6, 8)


@dataclass(frozen=True)
class SweepPoint:
    k: int
    events: list  # the run's StepEvents
    metrics: RunMetrics  # with the plain run's decode step
    speedup: float | None  # measured: tokens/s over the plain run's tokens/s


def sweep_k(pair, prompt_ids: list[int], config: GenerationConfig, ks=SWEEP_KS, *, plain_events=None, stop=None) -> Iterator[SweepPoint]:
    """Yield one point per K (fixed K: the adaptive and cost policies off), in the order of ks, each a
    run of the prompt ids (templated and encoded once, by the caller). `plain_events`: a plain run
    with the same settings, run here when not given. A set `stop` ends the sweep between steps."""
    source = OurSource(pair, config, stop=stop)
    if plain_events is None:
        plain_events = list(source.plain().decode(prompt_ids))
    plain = summarize(plain_events)
    for k in ks:
        if stop is not None and stop.is_set():
            return
        events = list(OurSource(pair, replace(config, k=k, k_policy="fixed"), stop=stop).decode(prompt_ids))
        if not events or (stop is not None and stop.is_set()):
            return
        metrics = summarize_runs(events, plain_events)
        yield SweepPoint(k, events, metrics, measured_speedup(metrics, plain))
