"""Sweep K: every point is a real run whose events are kept, against one plain run."""

from dataclasses import replace

import pytest

from tests.support.runs import run_checked, untimed
from specdec.core.config import GenerationConfig
from specdec.measure.metrics import summarize
from specdec.engines.ours import OurSource
from specdec.engines.sweep import sweep_k

PROMPT = "for i in range(10):"


def test_points_come_from_real_runs(tiny_pair):
    config = GenerationConfig(max_new_tokens=16, k=5, k_policy="adaptive")
    plain = run_checked(tiny_pair, PROMPT, replace(config, drafter="none"))
    ids = OurSource(tiny_pair, config).encode(PROMPT)
    points = list(sweep_k(tiny_pair, ids, config, ks=(1, 3), plain_events=plain))
    assert [p.k for p in points] == [1, 3]
    for point in points:
        again = run_checked(tiny_pair, PROMPT, replace(config, k=point.k, k_policy="fixed"))
        assert untimed(point.events) == untimed(again)  # the point's own run, fixed K
        assert max(e.k for e in point.events) == point.k and all(e.k <= point.k for e in point.events)
        assert point.speedup == pytest.approx(summarize(point.events).tokens_per_s / summarize(plain).tokens_per_s)
        assert point.metrics.decode_step_s == pytest.approx(summarize(plain).step_s)


def test_a_set_stop_ends_the_sweep(tiny_pair):
    import threading

    stop = threading.Event()
    stop.set()
    ids = OurSource(tiny_pair, GenerationConfig()).encode(PROMPT)
    assert list(sweep_k(tiny_pair, ids, GenerationConfig(max_new_tokens=8), ks=(1, 2), stop=stop)) == []
