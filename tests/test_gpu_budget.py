"""The duration a ZeroGPU call asks for, and the cap that keeps every call inside it."""

import pytest

from specdec.serving import gpu_budget
from specdec.core.config import GenerationConfig
from specdec.core.events import CORRECTION, PLAIN, StepEvent
from specdec.serving.gpu_budget import PassCosts, call_seconds, check_fits, max_new_tokens_within

COSTS = PassCosts(draft_s=0.02, verify_s=0.05, decode_s=0.04, setup_s=10.0)


def test_worst_case_is_every_draft_rejected():
    config = GenerationConfig(max_new_tokens=100, k=5)
    # 100 steps of 5 draft passes + 1 verify, then 100 plain passes
    assert call_seconds(config, True, COSTS) == pytest.approx(10 + 100 * (5 * 0.02 + 0.05) + 100 * 0.04)
    assert call_seconds(config, False, COSTS) == pytest.approx(10 + 100 * 0.15)
    assert call_seconds(GenerationConfig(max_new_tokens=100, drafter="lookup"), False, COSTS) == pytest.approx(10 + 100 * 0.05)
    adaptive = GenerationConfig(max_new_tokens=100, k=5, adaptive_k=True, k_max=16)
    assert call_seconds(adaptive, False, COSTS) == pytest.approx(10 + 100 * (16 * 0.02 + 0.05))


def test_a_long_compared_run_outlasts_the_default_call_and_the_cap_fits():
    config = GenerationConfig(max_new_tokens=1024, k=5)
    costs = PassCosts()
    assert call_seconds(config, True, costs) > gpu_budget.DEFAULT_SECONDS  # the case
    with pytest.raises(ValueError, match=r"max_new_tokens=1024 could need up to \d+ s of GPU time with K=5 and the plain "
                                         r"comparison; a GPU call here may last 60 s, so at most \d+ new tokens fit"):
        check_fits(config, True, costs, 60)
    fit = max_new_tokens_within(60, config, True, costs)
    assert 0 < fit < 1024
    check_fits(GenerationConfig(max_new_tokens=fit, k=5), True, costs, 60)
    with pytest.raises(ValueError):
        check_fits(GenerationConfig(max_new_tokens=fit + 1, k=5), True, costs, 60)


def event(step, drafted, draft_s, verify_s):
    n = len(drafted)
    return StepEvent(step=step, drafted=tuple(drafted), accepted=0, emitted=(1,), kind=CORRECTION if drafted else PLAIN,
                     p_target=(0.5,) * n, p_draft=(0.5,) * n, draft_s=draft_s, verify_s=verify_s, total_tokens=step + 1,
                     elapsed_s=0.0, emitted_text=("a",), drafted_text=("a",) * n, margins=(1.0,), k=n)


def test_measured_costs_replace_the_estimates():
    spec = [event(i, [7] * 4, 0.04, 0.02) for i in range(10)]  # 10 ms per draft pass, 20 ms per verify
    plain = [event(i, [], 0.0, 0.015) for i in range(10)]
    measured = COSTS.measured(GenerationConfig(drafter="model"), spec, plain)
    assert measured.draft_s == pytest.approx(1.5 * 0.01) and measured.verify_s == pytest.approx(1.5 * 0.02)
    assert measured.decode_s == pytest.approx(1.5 * 0.015) and measured.setup_s == COSTS.setup_s
    lookup = COSTS.measured(GenerationConfig(drafter="auto"), spec, [])
    assert lookup.draft_s == COSTS.draft_s and lookup.decode_s == COSTS.decode_s  # not measured: kept


def test_call_limit_from_the_environment():
    assert gpu_budget.call_limit({}) == 60
    assert gpu_budget.call_limit({"SPECDEC_GPU_SECONDS": "120"}) == 120
    with pytest.raises(ValueError, match="SPECDEC_GPU_SECONDS must be a positive number of seconds, got 'soon'"):
        gpu_budget.call_limit({"SPECDEC_GPU_SECONDS": "soon"})
    assert gpu_budget.on_zero_gpu({"SPACES_ZERO_GPU": "true"}) and not gpu_budget.on_zero_gpu({})
