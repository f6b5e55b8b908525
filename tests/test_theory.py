"""specdec.core.theory: Leviathan et al.'s formulas at known points, and the gap between predictions."""

import math
from types import SimpleNamespace

import pytest

from specdec.core.theory import (best_k, expected_pass_counts, iso_speedup_grid, prediction_gap, predicted_speedup,
                            speedup_curve, tokens_per_pass_distribution)


def test_tokens_per_pass_distribution():
    dist = tokens_per_pass_distribution(0.5, 3)
    assert dist == pytest.approx([0.5, 0.25, 0.125, 0.125])  # 0, 1, 2 kept then rejected; all 3 kept
    for a in (0.0, 0.3, 0.9, 1.0):
        d = tokens_per_pass_distribution(a, 5)
        assert sum(d) == pytest.approx(1.0)
        assert sum((n + 1) * p for n, p in enumerate(d)) == pytest.approx((1 - a**6) / (1 - a) if a < 1 else 6)
    assert tokens_per_pass_distribution(0.7, 0) == [1.0]


def test_expected_pass_counts_mix_the_steps_draft_lengths():
    counts = expected_pass_counts(0.5, [3, 3, 0])
    assert counts == pytest.approx([2 * 0.5 + 1.0, 2 * 0.25, 2 * 0.125, 2 * 0.125])
    assert expected_pass_counts(0.5, []) == [0.0]


def test_speedup_curve_and_best_k():
    ks = list(range(1, 17))
    flat = speedup_curve(0.8, 0.05, lambda k: 1.0, ks)
    assert flat == pytest.approx([predicted_speedup(0.8, k, 0.05) for k in ks])
    assert best_k(ks, flat) == max(ks, key=lambda k: predicted_speedup(0.8, k, 0.05))
    # A verify pass that grows with K moves the best K down.
    growing = speedup_curve(0.8, 0.05, lambda k: 1 + 0.2 * k, ks)
    assert best_k(ks, growing) < best_k(ks, flat)
    assert best_k([1, 2, 3], [1.0, 2.0, 2.0]) == 2  # the smaller K on a tie


def test_iso_speedup_grid():
    grid = iso_speedup_grid(4, 1.5, [0.0, 0.5, 0.9], [0.0, 0.2])
    assert len(grid) == 2 and len(grid[0]) == 3
    assert grid[1][2] == pytest.approx(predicted_speedup(0.9, 4, 0.2, 1.5))
    assert grid[0][0] == pytest.approx(1 / 1.5)  # nothing accepted, free drafts: one token per verify pass


def test_prediction_gap_factors():
    m = SimpleNamespace(predicted_speedup=1.2, predicted_speedup_with_verify_cost=0.8, predicted_speedup_from_passes=1.6,
                        tokens_per_pass=4.0, expected_tokens_per_pass=2.0)
    gap = prediction_gap(1.5, m)
    assert gap.verify_factor == pytest.approx(0.8 / 1.2) and gap.burst_factor == 2.0
    assert gap.unexplained == pytest.approx(1.5 / 1.6)
    assert gap.closest == "from_passes" and gap.ratio("textbook") == pytest.approx(1.25)
    assert prediction_gap(1.5, SimpleNamespace(predicted_speedup=None, predicted_speedup_with_verify_cost=1,
                                               predicted_speedup_from_passes=1)) is None
    assert not math.isinf(gap.ratio("with_verify_cost"))
