"""The duration a ZeroGPU call asks for, and the cap that keeps every call inside it."""

from dataclasses import replace

import pytest

from specdec.serving import gpu_budget
from specdec.core.config import GenerationConfig
from specdec.core.events import CORRECTION, PLAIN, StepEvent
from specdec.serving.gpu_budget import CaptureReport, PassCosts, call_seconds, check_fits, max_new_tokens_within

COSTS = PassCosts(draft_s=0.02, verify_s=0.05, decode_s=0.04, setup_s=10.0)


def test_worst_case_is_every_draft_rejected():
    config = GenerationConfig(max_new_tokens=100, k=5)
    # 100 steps of 5 draft passes + 1 verify, then 100 plain passes
    assert call_seconds(config, True, COSTS) == pytest.approx(10 + 100 * (5 * 0.02 + 0.05) + 100 * 0.04)
    assert call_seconds(config, False, COSTS) == pytest.approx(10 + 100 * 0.15)
    assert call_seconds(GenerationConfig(max_new_tokens=100, drafter="lookup"), False, COSTS) == pytest.approx(10 + 100 * 0.05)
    adaptive = GenerationConfig(max_new_tokens=100, k=5, k_policy="adaptive", k_max=16)
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


@pytest.fixture
def fresh_budget(monkeypatch):
    monkeypatch.setattr(gpu_budget, "_costs", {})
    monkeypatch.setattr(gpu_budget, "_captures", {})
    monkeypatch.setattr(gpu_budget, "_fresh_measured", set())


def test_learned_costs_are_kept_per_pair_kernel_variant_and_runner(fresh_budget):
    """A fast dense run must not shorten the duration asked for a slower kernel, variant or runner."""
    dense = GenerationConfig(max_new_tokens=100, k=4)
    key = gpu_budget.cost_key("tiny-random", dense)
    assert key == gpu_budget.CostKey("tiny-random", "dense", "dense", "eager")
    spec = [event(i, [7] * 4, 0.004, 0.002) for i in range(10)]  # far faster than the estimates
    gpu_budget.record(key, dense, spec, [event(i, [], 0.0, 0.002) for i in range(10)])
    learned = gpu_budget.costs_for(key)
    assert learned.verify_s == pytest.approx(1.5 * 0.002)
    others = [replace(dense, target_kernel="q4k"), replace(dense, draft_variant="int4"), replace(dense, runner="static")]
    for config in others:
        other = gpu_budget.cost_key("tiny-random", config)
        assert other != key and gpu_budget.costs_for(other).verify_s == PassCosts().verify_s, other
    assert gpu_budget.costs_for(gpu_budget.cost_key("qwen2.5-coder-7b/0.5b", dense)).verify_s == PassCosts().verify_s
    # without a draft model the variant does not matter, so every variant shares one key
    lookup = replace(dense, drafter="lookup")
    assert gpu_budget.cost_key("p", lookup) == gpu_budget.cost_key("p", replace(lookup, draft_variant="int4"))


def test_a_runners_capture_time_is_counted_once_per_call_and_measured_replaces_the_estimate(fresh_budget):
    config = GenerationConfig(max_new_tokens=50, k=5)
    eager = gpu_budget.cost_key("tiny-random", config)
    compiled = gpu_budget.cost_key("tiny-random", replace(config, runner="compiled"))
    e, c = gpu_budget.costs_for(eager), gpu_budget.costs_for(compiled)
    assert e.capture_s == 0.0 and c.capture_s == gpu_budget.CAPTURE_ESTIMATES["compiled"] > 0
    assert call_seconds(config, True, c) - call_seconds(config, True, e) == pytest.approx(c.capture_s)
    assert call_seconds(replace(config, max_new_tokens=500), True, c) - call_seconds(replace(config, max_new_tokens=500), True, e) \
        == pytest.approx(c.capture_s)  # once per call, whatever its length
    gpu_budget.record_capture(compiled, CaptureReport(4.0, fresh=True))
    assert gpu_budget.costs_for(compiled).capture_s == pytest.approx(1.5 * 4.0)
    assert gpu_budget.costs_for(eager).capture_s == 0.0
    fit_with, fit_without = (max_new_tokens_within(60, config, True, gpu_budget.costs_for(k)) for k in (compiled, eager))
    assert fit_with < fit_without
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match=f"capture seconds must be a number >= 0, got {bad}"):
            gpu_budget.record_capture(compiled, CaptureReport(bad, fresh=True))


def test_a_reused_workers_capture_never_lowers_the_figure(fresh_budget):
    """A call in a reused worker captures what that worker lacked, often nothing: its 0 s must not
    shorten the next call's duration, which may land in a fresh worker that captures everything."""
    compiled = gpu_budget.cost_key("tiny-random", GenerationConfig(runner="compiled"))
    estimate = gpu_budget.CAPTURE_ESTIMATES["compiled"]
    gpu_budget.record_capture(compiled, CaptureReport(0.0, fresh=False))
    assert gpu_budget.costs_for(compiled).capture_s == estimate
    gpu_budget.record_capture(compiled, CaptureReport(estimate, fresh=False))  # longer than the estimate: it grows
    assert gpu_budget.costs_for(compiled).capture_s == pytest.approx(1.5 * estimate)
    gpu_budget.record_capture(compiled, CaptureReport(1.0, fresh=False))
    assert gpu_budget.costs_for(compiled).capture_s == pytest.approx(1.5 * estimate)


def test_the_first_fresh_capture_replaces_the_estimate_and_the_figure_then_only_grows(fresh_budget):
    compiled = gpu_budget.cost_key("tiny-random", GenerationConfig(runner="compiled"))
    static = gpu_budget.cost_key("tiny-random", GenerationConfig(runner="static"))
    gpu_budget.record_capture(compiled, CaptureReport(2.0, fresh=True))  # far below the estimate: replaces it
    assert gpu_budget.costs_for(compiled).capture_s == pytest.approx(3.0)
    for seconds, fresh, figure in [(0.0, False, 3.0), (1.0, True, 3.0), (4.0, True, 6.0), (0.5, False, 6.0)]:
        gpu_budget.record_capture(compiled, CaptureReport(seconds, fresh))
        assert gpu_budget.costs_for(compiled).capture_s == pytest.approx(figure), (seconds, fresh)
    assert gpu_budget.costs_for(static).capture_s == gpu_budget.CAPTURE_ESTIMATES["static"]  # per key


def test_the_setup_grows_with_the_weights_a_call_moves_onto_the_card():
    tiny, big = gpu_budget.setup_estimate("tiny-random"), gpu_budget.setup_estimate("qwen2.5-coder-32b/0.5b")
    assert tiny == gpu_budget.SETUP_S
    assert big == pytest.approx(gpu_budget.SETUP_S + 33.0e9 * 2 / gpu_budget.MOVE_BYTES_PER_S)


def test_gpu_size_from_the_environment():
    assert gpu_budget.gpu_size({}) is None and gpu_budget.card_share({}) == 0.5
    assert gpu_budget.gpu_size({"SPECDEC_GPU_SIZE": "xlarge"}) == "xlarge" and gpu_budget.card_share({"SPECDEC_GPU_SIZE": "xlarge"}) == 1.0
    with pytest.raises(ValueError, match="SPECDEC_GPU_SIZE must be one of large, xlarge, got 'huge'"):
        gpu_budget.gpu_size({"SPECDEC_GPU_SIZE": "huge"})


def test_the_cost_policys_table_is_counted_where_it_may_be_measured_inside_the_call():
    fixed = GenerationConfig(max_new_tokens=64, k=5)
    cost = replace(fixed, k_policy="cost")
    without_table = replace(COSTS, table_s=0.0)
    assert COSTS.table_s > 0 and call_seconds(cost, True, COSTS) - call_seconds(cost, True, without_table) == pytest.approx(COSTS.table_s)
    assert call_seconds(fixed, True, COSTS) == call_seconds(fixed, True, without_table)  # a fixed K reads no table
    plain = replace(cost, drafter="none")  # nothing drafted: no table is read
    assert call_seconds(plain, False, COSTS) == pytest.approx(COSTS.setup_s + 64 * COSTS.decode_s)
    assert max_new_tokens_within(60, cost, True, COSTS) < max_new_tokens_within(60, cost, True, without_table)
