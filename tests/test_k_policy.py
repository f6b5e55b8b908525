"""specdec.core.k_policy with hand-made cost tables: K = 0 where drafting cannot pay, K > 0 where it
does, the choice is the best predicted rate, and the probes bring drafting back."""

import pytest

from specdec.core.k_policy import (AcceptanceEstimate, AdaptiveK, Choice, CostK, FixedK, best_choice, make_policy,
                              predicted_rate)
from specdec.core.config import GenerationConfig
from specdec.measure.passcost import PassCosts
from specdec.core.theory import expected_tokens_per_pass

SIZES = (1, 2, 3, 4, 6, 8, 12, 16)


def table(target_s, draft_s):
    return PassCosts(SIZES, tuple(target_s), draft_s, 200, 3)


# A memory-bound target (a GPU, AVX-512 BF16): checking 16 tokens costs about one decode step.
FLAT = table([0.20, 0.20, 0.21, 0.21, 0.22, 0.23, 0.25, 0.28], 0.02)
# A compute-bound target: every token of a pass costs a decode step.
LINEAR = table([0.2 * n for n in SIZES], 0.02)


def test_rate_is_expected_tokens_over_the_step_time():
    assert predicted_rate(0, 0.7, 0.02, FLAT) == pytest.approx(1 / 0.20)
    assert predicted_rate(3, 0.7, 0.02, FLAT) == pytest.approx(expected_tokens_per_pass(0.7, 3) / (3 * 0.02 + 0.21))


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.9])
def test_best_choice_is_the_argmax_over_every_k(alpha):
    choice = best_choice(alpha, 0.02, FLAT, 12)
    rates = [predicted_rate(k, alpha, 0.02, FLAT) for k in range(13)]
    assert choice.predicted_tok_s == max(rates) and rates[choice.k] == max(rates)


def test_drafting_pays_on_a_flat_check_with_a_cheap_draft():
    choice = best_choice(0.8, 0.02, FLAT, 15)
    assert choice.k > 0 and not choice.paused and choice.predicted_tok_s > 1 / 0.20


@pytest.mark.parametrize("alpha, draft_s, costs", [
    (0.8, 0.25, FLAT),  # a draft pass dearer than a decode step
    (0.05, 0.02, FLAT),  # drafts almost never accepted
    (0.9, 0.02, LINEAR),  # checking K+1 tokens costs K+1 decode steps: nothing to win
])
def test_k_zero_where_drafting_cannot_pay(alpha, draft_s, costs):
    choice = best_choice(alpha, draft_s, costs, 15)
    assert choice == Choice(0, 1 / 0.20, paused=True)


def test_never_predicted_slower_than_plain():
    for alpha in (0.0, 0.2, 0.5, 0.8, 0.99):
        for draft_s in (0.0, 0.05, 0.5):
            for costs in (FLAT, LINEAR):
                assert best_choice(alpha, draft_s, costs, 15).predicted_tok_s >= 1 / costs.target_pass_s(1)


def test_acceptance_estimate_counts_like_estimate_alpha_and_follows_the_text():
    est = AcceptanceEstimate()
    assert est.alpha == pytest.approx(0.8)  # the prior's mean
    est.update(0, 0)  # nothing drafted: no evidence
    assert est.alpha == pytest.approx(0.8)
    est.update(4, 1)  # one accepted, then a rejection
    assert est.alpha == pytest.approx((4 * 0.9 + 1) / (5 * 0.9 + 2))
    for _ in range(30):
        est.update(4, 0)
    low = est.alpha
    assert low < 0.2
    for _ in range(30):
        est.update(4, 4)  # the text turned easy: the old evidence fades
    assert est.alpha > 0.9 > low


def scripted(policy, accept, steps, source="model"):
    """Run the policy for `steps` steps; accept(k) -> accepted drafts. Returns the choices."""
    choices = []
    for _ in range(steps):
        c = policy.choose(source)
        choices.append(c)
        policy.update(c, c.k, accept(c.k), source)
    return choices


def test_cost_policy_stops_drafting_after_rejections_and_probes_on_a_fixed_schedule():
    policy = CostK(FLAT, 15)
    choices = scripted(policy, lambda k: 0, 300)
    assert choices[0].k > 0  # the prior says drafting pays here
    ks = [c.k for c in choices]
    first_plain = ks.index(0)
    probes = [i for i, c in enumerate(choices) if c.probe]
    assert probes[0] == first_plain + CostK.PROBE_AFTER
    waits = [b - a - 1 for a, b in zip(probes, probes[1:])]
    assert waits[:3] == [16, 32, 64] and set(waits[3:]) <= {CostK.PROBE_MAX}  # doubling, then capped
    assert all(choices[i].k == 1 for i in probes)
    assert all(c.paused == (c.k == 0) for c in choices)


def test_cost_policy_recovers_when_the_drafts_turn_good():
    policy = CostK(FLAT, 15)
    scripted(policy, lambda k: 0, 30)  # bad text: drafting stops
    assert policy.choose().k == 0
    after = scripted(policy, lambda k: k, 60)  # the text turns easy: every draft accepted
    first_probe = next(i for i, c in enumerate(after) if c.probe)
    assert after[-1].k >= 8 and not after[-1].paused and first_probe <= 64
    assert all(c.k > 0 for c in after[first_probe:])


def test_lookup_is_priced_without_a_draft_pass_and_counted_apart():
    costly_draft = table(FLAT.target_s, 0.5)
    policy = CostK(costly_draft, 15)
    assert policy.choose("model").k == 0 and policy.choose("lookup").k > 0
    policy.update(policy.choose("lookup"), 5, 0, "lookup")
    assert policy.estimates["model"].alpha == pytest.approx(0.8)  # the model's estimate saw nothing


def test_lookup_only_needs_no_draft_cost():
    policy = CostK(table(FLAT.target_s, None), 15)
    assert policy.choose("lookup").k > 0
    with pytest.raises(ValueError, match="draft model"):
        policy.choose("model")


def test_fixed_and_adaptive():
    assert [FixedK(3).choose().k for _ in range(2)] == [3, 3]
    adaptive = AdaptiveK(3, 6)
    ks = []
    for accepted in (3, 5, 1, 5):
        c = adaptive.choose()
        ks.append(c.k)
        adaptive.update(c, c.k, min(accepted, c.k))
    assert ks == [3, 5, 6, 5] and adaptive.choose().predicted_tok_s is None


def test_make_policy():
    assert isinstance(make_policy(GenerationConfig(k=5, k_policy="fixed")), FixedK)
    assert isinstance(make_policy(GenerationConfig(k=5, k_policy="adaptive")), AdaptiveK)
    cost = make_policy(GenerationConfig(k=5, k_policy="cost", k_max=32), FLAT)
    assert cost.k_max == 15  # the largest measured pass is 16 tokens
    with pytest.raises(ValueError, match="cost table"):
        make_policy(GenerationConfig(k=5, k_policy="cost"))
    with pytest.raises(ValueError, match="k_policy must be one of fixed, adaptive, cost"):
        make_policy(GenerationConfig(k=5, k_policy="best"))


@pytest.mark.parametrize("k_policy", ["fixed", "adaptive", "cost"])
def test_plain_decoding_drafts_nothing_whatever_the_policy(k_policy):
    """Nothing drafts: K = 0 every step, with no cost table needed."""
    policy = make_policy(GenerationConfig(k=5, k_policy=k_policy, drafter="none"))
    assert isinstance(policy, FixedK) and policy.choose("").k == 0
