"""specdec.measure.passcost on tiny-random: it times what it says and interpolates between sizes."""

import pytest

from specdec.core.config import GenerationConfig
from specdec.engines.ours import OurSource
from specdec.measure.passcost import PassCosts, measure, time_decode_step


def test_measure(tiny_pair):
    ids = tiny_pair.encode_prompt("def add(a, b):", chat=False, max_new_tokens=8)
    costs = measure(tiny_pair, ids, sizes=(1, 2, 4), repeats=2)
    assert costs.sizes == (1, 2, 4) and len(costs.target_s) == 3 and all(t > 0 for t in costs.target_s)
    assert costs.draft_s > 0 and costs.context == len(ids) and costs.c == costs.draft_s / costs.target_s[0]
    with pytest.raises(ValueError, match="context"):
        measure(tiny_pair, [])


def test_interpolation():
    costs = PassCosts((1, 2, 4, 8), (0.2, 0.2, 0.24, 0.32), 0.1, 100, 3)
    assert costs.decode_step_s == 0.2 and costs.c == pytest.approx(0.5)
    assert costs.target_pass_s(3) == pytest.approx(0.22) and costs.target_pass_s(6) == pytest.approx(0.28)
    assert costs.verify_cost(5) == pytest.approx(0.28 / 0.2)
    assert costs.target_pass_s(12) == pytest.approx(0.40)  # extrapolated along the last segment


def test_one_token_pass_after_a_run_leaves_the_cache_as_it_was(tiny_pair):
    decoding = OurSource(tiny_pair, GenerationConfig(max_new_tokens=6, k=2)).run("def add(a, b):")
    list(decoding)
    length = decoding.target.length
    assert time_decode_step(decoding) > 0 and decoding.target.length == length == len(decoding.seq) - 1
