"""specdec.measure.passcost on tiny-random: it times what it says and interpolates between sizes."""

import pytest

from specdec.core.config import GenerationConfig
from specdec.engines.ours import OurSource
from specdec.measure.passcost import PassCosts, measure, measure_targets, time_decode_step


def test_measure(tiny_pair):
    ids = tiny_pair.encode_prompt("def add(a, b):", chat=False, max_new_tokens=8)
    costs = measure(tiny_pair, ids, sizes=(1, 2, 4), repeats=2)
    assert costs.sizes == (1, 2, 4) and len(costs.target_s) == 3 and all(t > 0 for t in costs.target_s)
    assert costs.draft_s > 0 and costs.context == len(ids) and costs.c == costs.draft_s / costs.target_s[0]
    with pytest.raises(ValueError, match="context"):
        measure(tiny_pair, [])


def test_several_targets_are_timed_together_round_by_round(tiny_pair):
    """Each round times every target's sizes in turn, so a slow spell of the machine falls on all of
    them alike: the passes alternate between the targets, they do not run one target's repeats
    after the other's."""
    import copy

    targets = {"a": tiny_pair.target, "b": copy.deepcopy(tiny_pair.target)}
    order = []
    hooks = [module.get_output_embeddings().register_forward_hook(lambda *_, key=key: order.append(key)) for key, module in targets.items()]
    try:
        ids = tiny_pair.encode_prompt("def add(a, b):", chat=False, max_new_tokens=8)
        tables = measure_targets(targets, tiny_pair.vocab_size, ids, sizes=(1, 2), repeats=3)
    finally:
        for hook in hooks:
            hook.remove()
    assert order[-12:] == ["a", "a", "b", "b"] * 3  # the timed passes: sizes 1 and 2 of a, then of b, three rounds
    assert set(tables) == {"a", "b"}
    for costs in tables.values():
        assert costs.sizes == (1, 2) and all(t > 0 for t in costs.target_s) and costs.draft_s is None and costs.repeats == 3
        assert costs.streamed_bytes > 0 and costs.read_rate > 0
    with pytest.raises(ValueError, match="context"):
        measure_targets(targets, tiny_pair.vocab_size, [])


def test_interpolation():
    costs = PassCosts((1, 2, 4, 8), (0.2, 0.2, 0.24, 0.32), 0.1, 100, 3)
    assert costs.decode_step_s == 0.2 and costs.c == pytest.approx(0.5)
    assert costs.target_pass_s(3) == pytest.approx(0.22) and costs.target_pass_s(6) == pytest.approx(0.28)
    assert costs.verify_cost(5) == pytest.approx(0.28 / 0.2)
    assert costs.target_pass_s(12) == pytest.approx(0.40)  # extrapolated along the last segment


def test_a_pass_over_more_tokens_never_reads_cheaper_than_one_over_fewer():
    """A table measured on a noisy machine (a 2-token check timed under the decode step, as one was on
    an Intel Xeon: 68.1 ms against 71.0) is read at the smaller size's time, so the cost policy never
    sees a check cheaper than a plain step."""
    from specdec.core.k_policy import best_choice

    costs = PassCosts((1, 2, 3, 4), (0.0710, 0.0681, 0.0686, 0.0706), draft_s=None, context=200, repeats=3, head_s=0.004)
    assert [costs.target_pass_s(n) for n in (1, 2, 3, 4)] == [0.0710] * 4
    assert costs.verify_cost(1) == 1.0 and costs.target_pass_s(1.5) == 0.0710
    assert best_choice(0.03, 0.004, costs, 3).k == 0  # at 3% acceptance a drafted token no longer pays for itself


def test_one_token_pass_after_a_run_leaves_the_cache_as_it_was(tiny_pair):
    decoding = OurSource(tiny_pair, GenerationConfig(max_new_tokens=6, k=2)).run("def add(a, b):")
    list(decoding)
    length = decoding.target.length
    assert time_decode_step(decoding) > 0 and decoding.target.length == length == len(decoding.seq) - 1
