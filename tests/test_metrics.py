import math

import pytest

from specdec.events import BONUS, CORRECTION, StepEvent
from specdec.metrics import expected_tokens_per_pass, predicted_speedup, summarize


def test_leviathan_formulas():
    # a = 0.8, K = 4: (1 - 0.8^5) / 0.2 = 3.3616 tokens per pass
    assert expected_tokens_per_pass(0.8, 4) == pytest.approx(3.3616)
    assert predicted_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    assert expected_tokens_per_pass(1.0, 4) == 5
    assert expected_tokens_per_pass(0.0, 4) == 1


def event(step, drafted, accepted, kind, total, elapsed, draft_s=0.02, verify_s=0.1):
    emitted = drafted[:accepted] + (99,)
    return StepEvent(step, drafted, accepted, emitted, kind, (0.5,) * len(drafted), (0.5,) * len(drafted),
                     draft_s, verify_s, total, elapsed, ("x",) * len(emitted), ("x",) * len(drafted), (1.0,) * len(emitted))


def test_summarize():
    events = [event(0, (1, 2, 3, 4), 4, BONUS, 5, 0.5), event(1, (1, 2, 3, 4), 1, CORRECTION, 7, 1.0)]
    m = summarize(events)
    assert (m.tokens, m.target_passes, m.drafted, m.accepted) == (7, 2, 8, 5)
    assert m.acceptance_rate == 5 / 8 and m.tokens_per_step == 3.5 and m.tokens_per_s == 7.0
    assert m.cost_ratio_c == pytest.approx((0.04 / 8) / 0.1)
    assert m.predicted_speedup == pytest.approx(predicted_speedup(5 / 8, 4, 0.05))
    assert math.isfinite(summarize([]).tokens_per_s)
