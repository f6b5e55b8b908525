import math

import pytest

from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, PLAIN
from specdec.measure.metrics import (FROM_ONE_TOKEN_PASS, FROM_OWN_STEPS, FROM_PLAIN, estimate_alpha, expected_tokens_per_pass,
                             measured_speedup, predicted_speedup, summarize, summarize_runs)
from tests.support.events import event


def test_leviathan_formulas():
    # a = 0.8, K = 4: (1 - 0.8^5) / 0.2 = 3.3616 tokens per pass
    assert expected_tokens_per_pass(0.8, 4) == pytest.approx(3.3616)
    assert predicted_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    assert predicted_speedup(0.8, 4, 0.05, verify_cost=2.0) == pytest.approx(3.3616 / 2.2)
    assert expected_tokens_per_pass(1.0, 4) == 5
    assert expected_tokens_per_pass(0.0, 4) == 1


def test_summarize():
    events = [event(0, (1, 2, 3, 4), 4, BONUS, 5, 0.5), event(1, (1, 2, 3, 4), 1, CORRECTION, 7, 1.0)]
    m = summarize(events)
    assert (m.tokens, m.target_passes, m.drafted, m.accepted) == (7, 2, 8, 5)
    assert m.accepted_share == 5 / 8 and m.tokens_per_pass == 3.5 and m.tokens_per_s == 7.0
    assert m.alpha == 5 / 6  # 5 accepted, 1 rejection
    assert m.decode_step_s is None and m.cost_ratio_c is None and m.predicted_speedup is None  # no decode step known
    assert math.isfinite(summarize([]).tokens_per_s)


def test_alpha_counts_rejections_not_unchecked_drafts():
    # Step 0: 2 kept, then a rejection (drafts 4 and 5 never checked); step 1: all 5 kept;
    # step 2: rejected at once; step 3: an accepted draft ended the run (no rejection seen).
    events = [
        event(0, (1, 2, 3, 4, 5), 2, CORRECTION, 3, 0.1),
        event(1, (1, 2, 3, 4, 5), 5, BONUS, 9, 0.2),
        event(2, (1, 2, 3, 4, 5), 0, CORRECTION, 10, 0.3),
        event(3, (1, 2), 2, EOS_ACCEPTED, 12, 0.4),
    ]
    assert estimate_alpha(events) == pytest.approx(9 / (9 + 2))
    assert summarize(events).accepted_share == pytest.approx(9 / 17)
    assert estimate_alpha([event(0, (), 0, PLAIN, 1, 0.1)]) == 0.0
    assert estimate_alpha([event(0, (1, 2), 2, BONUS, 3, 0.1)]) == 1.0


def test_costs_and_predictions_at_a_known_point():
    # Every step drafts K = 4 in 4 x 0.02 s and verifies in 0.15 s; a decode step is 0.1 s.
    events = [event(0, (1, 2, 3, 4), 4, BONUS, 5, 0.23, draft_s=0.08, verify_s=0.15),
              event(1, (1, 2, 3, 4), 1, CORRECTION, 7, 0.46, draft_s=0.08, verify_s=0.15)]
    m = summarize(events, decode_step_s=0.1, decode_step_from=FROM_PLAIN)
    a, k, c, v = 5 / 6, 4, 0.2, 1.5
    assert (m.alpha, m.mean_k) == (pytest.approx(a), k)
    assert m.cost_ratio_c == pytest.approx(c) and m.verify_cost == pytest.approx(v)
    e = (1 - a**5) / (1 - a)
    assert m.expected_tokens_per_pass == pytest.approx(e)
    assert m.predicted_speedup == pytest.approx(e / (k * c + 1))
    assert m.predicted_speedup_with_verify_cost == pytest.approx(e / (k * c + v))
    assert m.predicted_speedup_from_passes == pytest.approx(3.5 * 0.1 / 0.23)  # tokens per pass x decode step / step


def test_decode_step_sources():
    spec = [event(0, (1, 2), 2, BONUS, 3, 0.3, draft_s=0.1, verify_s=0.2)]
    plain = [event(i, (), 0, PLAIN, i + 1, 0.1 * (i + 1), draft_s=0.0, verify_s=0.1) for i in range(3)]
    m = summarize_runs(spec, plain)
    assert (m.decode_step_s, m.decode_step_from) == (pytest.approx(0.1), FROM_PLAIN)
    assert m.cost_ratio_c == pytest.approx(0.5) and m.verify_cost == pytest.approx(2.0)
    m = summarize_runs(spec, None, decode_step_s=0.2)
    assert (m.decode_step_s, m.decode_step_from, m.verify_cost) == (0.2, FROM_ONE_TOKEN_PASS, pytest.approx(1.0))
    # Prompt lookup found nothing at step 1: that one-token pass is a decode step.
    mixed = spec + [event(1, (), 0, PLAIN, 4, 0.45, draft_s=0.001, verify_s=0.15)]
    assert (summarize(mixed).decode_step_s, summarize(mixed).decode_step_from) == (pytest.approx(0.15), FROM_OWN_STEPS)
    assert measured_speedup(summarize(spec), summarize(plain)) == pytest.approx((3 / 0.3) / (3 / 0.3))


def test_lookup_costs_no_draft_pass_and_the_model_gets_its_own_c():
    events = [event(0, (1, 2, 3), 3, BONUS, 4, 0.1, draft_s=0.0003, drafter="lookup"),
              event(1, (1, 2, 3), 1, CORRECTION, 6, 0.5, draft_s=0.3, drafter="model")]
    m = summarize(events, decode_step_s=0.2, decode_step_from=FROM_PLAIN)
    assert (m.model_steps, m.lookup_steps) == (1, 1)
    assert m.draft_model_c == pytest.approx(0.1 / 0.2)  # the model's pass alone: 0.3 s / 3 drafts
    assert m.cost_ratio_c == pytest.approx(0.3003 / 6 / 0.2)  # the blend


def test_adaptive_k_predictions_take_each_step_at_its_own_k():
    # Adaptive K: one step drafted 1 token, one drafted 9 (mean K = 5); 4 accepted, 2 rejections.
    events = [event(0, (1,), 0, CORRECTION, 1, 0.1, draft_s=0.01, verify_s=0.1),
              event(1, (1, 2, 3, 4, 5, 6, 7, 8, 9), 4, CORRECTION, 6, 0.3, draft_s=0.09, verify_s=0.1)]
    m = summarize(events, decode_step_s=0.1, decode_step_from=FROM_PLAIN)
    a, c = 4 / 6, 0.1
    per_step = (expected_tokens_per_pass(a, 1) + expected_tokens_per_pass(a, 9)) / 2
    at_mean_k = expected_tokens_per_pass(a, 5)
    assert m.mean_k == 5 and at_mean_k > per_step * 1.1  # the formula is concave in K: the two differ
    assert m.expected_tokens_per_pass == pytest.approx(per_step)
    assert m.predicted_speedup == pytest.approx(per_step / (5 * c + 1))  # the cost side is linear in K
    assert m.predicted_speedup_with_verify_cost == pytest.approx(per_step / (5 * c + m.verify_cost))
