"""specdec.core.k_policy with hand-made cost tables and ones recorded on the two CPU kinds: K = 0 where
drafting cannot pay, K > 0 where it does, the choice is the best predicted rate, and the probes bring
drafting back."""

import json

import pytest

from specdec.core.k_policy import (OVERHEAD_STEPS, AcceptanceEstimate, AdaptiveK, CostK, FixedK, best_choice,
                                   could_pay, make_policy, predicted_rate)
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
    overhead = OVERHEAD_STEPS * 0.20  # a drafting step's time outside its passes, in the table's decode steps
    assert predicted_rate(3, 0.7, 0.02, FLAT) == pytest.approx(expected_tokens_per_pass(0.7, 3) / (3 * 0.02 + 0.21 + overhead))
    measured = PassCosts(SIZES, FLAT.target_s, 0.02, 200, 3, overhead_s=0.05)  # a table's own overhead wins
    assert predicted_rate(3, 0.7, 0.02, measured) == pytest.approx(expected_tokens_per_pass(0.7, 3) / (3 * 0.02 + 0.21 + 0.05))


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
    assert (choice.k, choice.predicted_tok_s, choice.paused, choice.probe) == (0, 1 / 0.20, True, False)
    assert choice.why.startswith(f"drafting would cost more than it saves here: c = {draft_s / 0.20:.2f}, \u03b1 = {alpha:.2f}")


def test_no_probe_where_no_recorded_acceptance_could_pay():
    """A draft pass about as dear as a decode step (c = 0.9): at the draft model's highest recorded
    acceptance (0.89, on code) drafting still loses, so the run decodes plain throughout, with no probe.
    A draft that could pay keeps its probes."""
    dear = table(FLAT.target_s, 0.18)
    assert not could_pay(0.89, 0.18, dear, 8) and could_pay(1.0, 0.18, dear, 8) and could_pay(0.89, 0.02, FLAT, 8)
    for costs, probes in ((dear, 0), (FLAT, 3)):
        policy = CostK(costs, 8, {"model": 0.05})
        choices = []
        for _ in range(64):
            choice = policy.choose("model")
            policy.update(choice, choice.k, 0)  # nothing ever accepted
            choices.append(choice)
        assert sum(c.probe for c in choices) == probes and sum(c.k for c in choices) == probes
        said = [c.why.endswith("not even at \u03b1 = 0.89, its highest recorded, so no probe follows") for c in choices if c.paused]
        assert all(said) if probes == 0 else not any(said)


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
    policy = CostK(costly_draft, 15, priors={"model": 0.8, "lookup": 0.8, "head": 0.8})
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


# Recorded cost tables: the policy's choice on what passes cost on these machines, not on made-up shapes.
# The AVX2 machine's fp32 target with the bf16 draft (docs/benchmarks.md, "What the cost policy chooses here"):
# a check of 6 tokens costs 1.9 decode steps and a draft pass 0.32 of one.
AVX2_FP32 = PassCosts((1, 2, 4, 6, 8), (0.449, 0.697, 0.781, 0.846, 0.954), 0.32 * 0.449, 200, 3)
# The AVX-512 BF16 machine's w8a8 target with the w8a8-v32k draft (docs/benchmarks.md, "W8A8"): 63.0 ms for one
# token, 67 ms for six, a draft pass 23.9 ms.
AVX512_W8A8 = PassCosts((1, 6), (0.063, 0.067), 0.0239, 200, 3)


@pytest.mark.parametrize("alpha, k, speedup", [(0.5, 0, 1.00), (0.7, 0, 1.00), (0.8, 3, 1.09), (0.9, 5, 1.35), (0.95, 7, 1.54)])
def test_the_recorded_avx2_table_gives_the_choices_docs_print(alpha, k, speedup):
    """Where the check costs about two decode steps and a draft pass a third of one, drafting pays only
    at an acceptance of about 4 in 5 or more: K = 0 below it (the table in docs/benchmarks.md)."""
    choice = best_choice(alpha, AVX2_FP32.draft_s, AVX2_FP32, 7)
    assert choice.k == k and choice.paused == (k == 0)
    # docs print the rate before a step's overhead outside its passes (k_policy.OVERHEAD_STEPS) was priced in
    assert choice.predicted_tok_s * AVX2_FP32.decode_step_s == pytest.approx(speedup, abs=0.012)


def test_on_the_recorded_avx2_table_drafts_that_miss_stop_the_drafting(tmp_path):
    """The AVX2 table read from a cost file as a run reads it: on text the draft model was recorded at 0.8,
    drafting from that prior, and once the drafts keep missing, K = 0 (plain steps) until the scheduled probe."""
    from specdec.measure import cost_table

    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"format": cost_table.FORMAT, "version": cost_table.VERSION, "costs": {
        "sizes": list(AVX2_FP32.sizes), "target_s": list(AVX2_FP32.target_s), "draft_s": AVX2_FP32.draft_s,
        "draft_feed_s": [AVX2_FP32.draft_pass_s(n) for n in AVX2_FP32.sizes], "context": 200, "repeats": 3}}), encoding="utf-8")
    policy = make_policy(GenerationConfig(k=5, k_policy="cost", k_max=16), cost_table.read(path))
    assert isinstance(policy, CostK) and policy.k_max == 7  # one less than its largest pass, 8 tokens
    policy.estimates["model"] = AcceptanceEstimate(0.8)
    first = policy.choose()
    assert first.k == 3  # the prior's 0.8: the table's K for it
    policy.update(first, first.k, 0)  # the first draft token rejected
    ks = []
    for _ in range(CostK.PROBE_AFTER + 1):
        choice = policy.choose()
        ks.append(choice.k)
        policy.update(choice, choice.k, 0)
    assert ks == [0] * CostK.PROBE_AFTER + [1]  # plain steps, then one probe of K = 1
    after = policy.choose()
    assert (after.k, after.predicted_tok_s, after.paused) == (0, 1 / AVX2_FP32.decode_step_s, True)


def test_a_recorded_table_where_drafting_pays_drafts():
    """A flat check (6 tokens cost 1.06 decode steps) and a draft at 0.38 of a decode step: K > 0 from
    the prior on, predicted faster than plain."""
    policy = make_policy(GenerationConfig(k=5, k_policy="cost", k_max=16), AVX512_W8A8)
    choice = policy.choose()
    assert policy.k_max == 5 and choice.k > 0 and not choice.paused  # at most one less than its largest pass
    assert choice.predicted_tok_s > 1 / AVX512_W8A8.decode_step_s


def recorded_table(name: str) -> PassCosts:
    """A cost table recorded on one of the CPU kinds (tests/data/costs_*.json), with its first draft variant."""
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "data" / f"costs_{name}.json").read_text(encoding="utf-8"))
    (kernel, t), = data["tables"].items()
    return PassCosts(tuple(t["sizes"]), tuple(t["target_s"]), next(iter(data["drafts"].values())), 200, 3,
                     head_s=data["head_s"][kernel])


@pytest.mark.parametrize("name", ["amd_avx2", "amd_avx512", "intel_amx"])
def test_below_break_even_a_run_drafts_on_at_most_a_few_steps(name):
    """Translation-like acceptance (0.1, recorded): from the first step on, plain steps; only the probes
    draft, one K = 1 step each after 8, 16, 32 plain steps: at most 3 of 64 steps draft, on every CPU kind."""
    costs = recorded_table(name)
    policy = CostK(costs, 5, priors={"model": 0.1, "lookup": 0.1, "head": 0.1})
    drafting = []
    for step in range(64):
        choice = policy.choose("model")
        if choice.k:
            drafting.append(step)
        policy.update(choice, choice.k, 0)  # text where the drafts miss
    assert len(drafting) <= 3 and 0 not in drafting, drafting
    assert policy.choose("model").why.startswith("drafting would cost more than it saves here: c = ")


def test_each_drafter_starts_from_its_recorded_acceptance_not_a_fixed_prior():
    from specdec.core.recorded_acceptance import recorded

    policy = make_policy(GenerationConfig(k=5, k_policy="cost"), recorded_table("amd_avx512"))
    for drafter in ("model", "lookup", "head"):
        assert policy.estimates[drafter].alpha == pytest.approx(recorded(drafter).alpha)
    assert recorded("model").alpha < 0.8 and recorded("model").source  # the draft model on held-out chat, with its source
    # On the AMD AVX-512 machine the int4 draft (c 0.57) at that acceptance does not pay: plain steps from the first
    first = policy.choose("model")
    assert first.k == 0 and first.paused and "c = 0.57" in first.why


def test_the_recorded_acceptance_file_falls_back_when_it_cannot_be_read(tmp_path):
    from specdec.core.recorded_acceptance import FALLBACK, highest, priors, recorded
    from specdec.core.theory import alpha_from_share

    broken = tmp_path / "acceptance.json"
    broken.write_text("{")
    assert priors(path=broken) == {"model": FALLBACK, "head": FALLBACK, "lookup": FALLBACK}
    assert highest("model", path=broken) == FALLBACK and highest("model") == recorded("model", "code").alpha == 0.89
    assert recorded("model", "code").kind == "code" and recorded("model", "no-such-kind").kind == "general"
    assert sum(alpha_from_share(0.38, 3) ** i for i in (1, 2, 3)) / 3 == pytest.approx(0.38)


def test_the_head_estimate_starts_from_the_head_files_own_figure():
    from specdec.core.recorded_acceptance import priors

    policy = make_policy(GenerationConfig(drafter="auto_head", k_policy="cost", k_max=8), FLAT, head_prior=0.61)
    assert policy.estimates["head"].alpha == pytest.approx(0.61)
    assert policy.estimates["model"].alpha == pytest.approx(priors()["model"])  # the others keep the recorded figures
    recorded = make_policy(GenerationConfig(drafter="head", k_policy="cost", k_max=8), FLAT)
    assert recorded.estimates["head"].alpha == pytest.approx(priors()["head"])


def test_the_head_files_prior_is_its_lower_held_out_figure_at_position_1_as_a_run_drafts_where_recorded():
    from specdec.kernels.head_offer import validation_prior

    every_start = {"acceptance_by_position": [0.44, 0.5], "read_text": {"acceptance": [0.33, 0.4]}}
    assert validation_prior({"figures": every_start}) == pytest.approx(0.33)
    walked = {**every_start, "walk": {"rates": [0.52]}, "read_text": {**every_start["read_text"], "walk": {"rates": [0.47]}}}
    assert validation_prior({"figures": walked}) == pytest.approx(0.47)
    assert validation_prior({"figures": {"acceptance_by_position": [float("nan")]}}) is None
    assert validation_prior({}) is None


def test_the_draft_models_catch_up_is_priced():
    """After plain or lookup steps the draft model's first pass feeds every token it has not read. With
    a cheap one-token pass (c 0.2) but a 9-token catch-up at 1.5 decode steps, drafting pays when the
    draft model is caught up and not when it is 9 tokens behind; the pause says what the catch-up costs."""
    step = 0.05
    costs = PassCosts((1, 2, 4, 8, 16), tuple(step * f for f in (1.0, 1.02, 1.05, 1.1, 1.2)), 0.2 * step, 200, 3,
                      draft_feed_s=tuple(step * f for f in (0.2, 0.3, 0.6, 1.3, 2.6)))
    assert costs.draft_pass_s(1) == costs.draft_s and costs.draft_pass_s(9) == pytest.approx(step * (1.3 + 1.3 / 8))
    policy = CostK(costs, 5, priors={"model": 0.6, "lookup": 0.6, "head": 0.6})
    assert policy.choose("model", unseen=1).k > 0
    behind = policy.choose("model", unseen=9)
    assert behind.k == 0 and behind.paused
    assert behind.why.endswith("and the draft model would first read the 9 tokens it has not seen, at 1.46")
    assert policy.choose("lookup", unseen=9).k > 0  # prompt lookup reads no model: nothing to catch up
    # the probe that follows 8 plain steps is priced with its catch-up too
    assert predicted_rate(1, 0.6, costs.draft_s, costs, costs.draft_pass_s(9)) < predicted_rate(1, 0.6, costs.draft_s, costs)


def test_another_drafters_steps_neither_count_nor_reset_a_drafters_probe_wait():
    """Each drafter keeps its own run of plain steps: prompt lookup drafting on a match every few steps
    must not keep the draft model's probe from coming, nor bring it sooner."""
    policy = CostK(FLAT, 8, {"model": 0.01, "lookup": 0.9, "head": 0.5})
    asked = []
    for step in range(40):
        drafter = "lookup" if step % 3 == 2 else "model"  # a spurious match every third step
        choice = policy.choose(drafter)
        policy.update(choice, choice.k, 0, drafter)
        asked.append((drafter, choice))
    model = [c for d, c in asked if d == "model"]
    assert [i for i, c in enumerate(model) if c.probe] == [8, 25]  # its own 8 plain steps, then 16
    assert all(c.k > 0 for d, c in asked if d == "lookup")  # lookup drafts (its estimate is its own)


def test_without_timed_catch_ups_the_targets_growth_stands_in():
    costs = PassCosts((1, 4), (0.05, 0.06), 0.01, 200, 3)
    assert costs.draft_pass_s(4) == pytest.approx(0.012) and costs.draft_pass_s(1) == 0.01


def test_the_run_asks_the_policy_with_the_tokens_the_draft_model_has_not_read(tiny_pair, monkeypatch):
    """Prompt lookup and the draft model take turns (auto), and a draft model dearer than a decode step
    pauses: each model step is priced with 1 plus the tokens of the steps it did not draft since its
    last, counted here from the events, so the probes pay for catching up on the plain steps before them."""
    from tests.support.runs import run_checked

    asked = []
    original = CostK.choose_among

    def spy(self, options):
        (option,) = options  # auto offers one drafter a step: lookup on a match, else the draft model
        asked.append(option)
        return original(self, options)

    monkeypatch.setattr(CostK, "choose_among", spy)
    prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
    costs = PassCosts((1, 2, 3, 4, 6, 8, 12, 16), tuple(0.01 * (1 + 0.03 * n) for n in (1, 2, 3, 4, 6, 8, 12, 16)), 0.012, 200, 3)
    config = GenerationConfig(k=2, k_policy="cost", k_max=6, drafter="auto", max_new_tokens=40)
    events = run_checked(tiny_pair, prompt, config, costs=costs)
    assert len(asked) == len(events)
    position, caught_up = 0, 0  # tokens generated so far; and after the last step the draft model drafted
    seen_behind = False
    for (drafter, unseen), event in zip(asked, events):
        if drafter == "model":
            assert unseen == position - caught_up + 1, (event.step, unseen, position - caught_up + 1)
            seen_behind |= unseen > 2
            if event.drafted:
                caught_up = position + len(event.emitted)
        position += len(event.emitted)
    assert seen_behind  # a probe came after plain steps and caught up on them
    from specdec.bench.predictions import catch_ups

    asked_of_model = {e.step: unseen for (drafter, unseen), e in zip(asked, events) if drafter == "model" and e.drafted}
    assert catch_ups(events) == asked_of_model  # what bench --predictions prices is what the policy was asked


def test_the_heads_first_draft_of_a_step_is_priced_at_its_own_cost():
    """The head's first draft of a step reads its weights from memory again (the target's pass has
    just emptied the caches): priced at head_first_s, each further draft at head_s. At an acceptance
    where drafting pays at the further drafts' price alone, it does not at the first's."""
    from dataclasses import replace

    warm = replace(FLAT, head_s=0.01, head_first_s=0.01)
    cold = replace(FLAT, head_s=0.01, head_first_s=0.04)
    alpha = 0.2
    priors = {"model": alpha, "lookup": alpha, "head": alpha}
    assert CostK(warm, 5, priors).choose("head").k > 0
    paused = CostK(cold, 5, priors).choose("head")
    assert paused.k == 0 and paused.why.startswith(f"drafting would cost more than it saves here: c = {0.04 / 0.20:.2f}")
    overhead = OVERHEAD_STEPS * 0.20
    sure = CostK(cold, 5, {"model": 0.9, "lookup": 0.9, "head": 0.9}).choose("head")  # one first draft, four further
    assert sure.k == 5 and sure.predicted_tok_s == pytest.approx(
        expected_tokens_per_pass(0.9, 5) / (0.04 + 4 * 0.01 + cold.target_pass_s(6) + overhead))


def test_the_draft_models_first_pass_of_a_step_is_priced_cold_even_when_caught_up():
    """The draft model's first pass of a step finds its weights pushed out of the caches by the
    target's pass, after a step it drafted too (1 unseen token): priced at the table's first pass
    over 1 token (timed with the caches emptied), each further pass at draft_s. At an acceptance
    where drafting pays at the warm pass's price, it does not at the cold one's."""
    from dataclasses import replace

    warm = replace(FLAT, draft_s=0.04, draft_feed_s=(0.04,) * len(FLAT.sizes))
    cold = replace(FLAT, draft_s=0.04, draft_feed_s=(0.07,) * len(FLAT.sizes))
    alpha = 0.3
    priors = {"model": alpha, "lookup": alpha, "head": alpha}
    assert CostK(warm, 5, priors).choose("model", unseen=1).k > 0
    paused = CostK(cold, 5, priors).choose("model", unseen=1)
    assert paused.k == 0 and paused.why.startswith(f"drafting would cost more than it saves here: c = {0.07 / 0.20:.2f}")
    sure = CostK(cold, 5, {"model": 0.9, "lookup": 0.9, "head": 0.9}).choose("model", unseen=1)  # one cold pass, four warm
    assert sure.k > 1 and sure.predicted_tok_s == pytest.approx(
        expected_tokens_per_pass(0.9, sure.k) / (0.07 + (sure.k - 1) * 0.04 + cold.target_pass_s(sure.k + 1) + OVERHEAD_STEPS * 0.20))


# --- auto_both: the head or the draft model, whichever is priced faster ------------------------------

BOTH = PassCosts(SIZES, FLAT.target_s, 0.06, 200, 3, head_s=0.01)  # the draft model at c = 0.3, the head at 0.05


def test_both_offered_the_drafter_predicted_faster_drafts():
    policy = CostK(BOTH, 8, {"model": 0.6, "head": 0.6, "lookup": 0.5})
    index, choice = policy.choose_among([("model", 1), ("head", 1)])
    assert index == 1 and choice.k > 0  # alike acceptance: the cheaper head
    assert choice.predicted_tok_s == policy.choose("head").predicted_tok_s > policy.choose("model").predicted_tok_s
    for _ in range(6):  # the head's drafts are turned down, step after step
        policy.update(policy.choose("head"), 3, 0, "head")
    policy.estimates["model"] = AcceptanceEstimate(0.9)  # and the draft model's are taken
    index, choice = policy.choose_among([("model", 1), ("head", 1)])
    assert index == 0 and choice.k > 0 and choice.predicted_tok_s == policy.choose("model").predicted_tok_s


def test_both_paused_each_counts_its_plain_steps_and_the_first_due_probes_then_the_other():
    policy = CostK(BOTH, 8, {"model": 0.1, "head": 0.02, "lookup": 0.5})
    both = [("model", 1), ("head", 1)]
    steps = []
    for _ in range(CostK.PROBE_AFTER + 2):
        index, choice = policy.choose_among(both)
        steps.append((index, choice.k, choice.probe))
        policy.update(choice, choice.k, 0, both[index][0])  # a probe's draft is turned down
    assert steps[: CostK.PROBE_AFTER] == [(1, 0, False)] * CostK.PROBE_AFTER
    assert steps[CostK.PROBE_AFTER:] == [(0, 1, True), (1, 1, True)]  # the draft model's probe first, the head's the next step
    assert policy.wait == {"model": 16, "head": 16, "lookup": CostK.PROBE_AFTER}


def test_a_paused_step_with_both_offered_says_why_for_each():
    policy = CostK(BOTH, 8, {"model": 0.1, "head": 0.02, "lookup": 0.5})
    index, choice = policy.choose_among([("model", 1), ("head", 1)])
    assert choice.paused and choice.k == 0
    model, head = choice.why.split("; with ")
    assert model.startswith("with the draft model, drafting would cost more than it saves here: c = 0.30, \u03b1 = 0.10")
    assert head.startswith("the trained head, drafting would cost more than it saves here: c = 0.05, \u03b1 = 0.02")


def test_a_drafter_that_would_have_drafted_but_lost_does_not_count_a_plain_step():
    policy = CostK(BOTH, 8, {"model": 0.7, "head": 0.9, "lookup": 0.5})
    policy.plain_run["model"] = 5
    index, choice = policy.choose_among([("model", 1), ("head", 1)])
    assert index == 1 and policy.asked == {"model": False, "head": False}
    policy.update(choice, choice.k, choice.k, "head")
    assert policy.plain_run == {"model": 0, "head": 0, "lookup": 0}


@pytest.mark.parametrize("policy", [FixedK(3), AdaptiveK(3, 8)])
def test_without_prices_the_last_drafter_offered_drafts(policy):
    assert policy.choose_among([("model", 1), ("head", 1)]) == (1, policy.choose())
    assert policy.choose_among([("lookup", 1)]) == (0, policy.choose())
