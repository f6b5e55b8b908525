"""Greedy speculative output is token-identical to greedy plain output (fp32, tiny-random)."""

from dataclasses import replace

import pytest

from tests.support.runs import run_checked, tokens, untimed
from specdec.core.config import GenerationConfig
from specdec.engines.ours import OurSource
from specdec.core.events import EOS_ACCEPTED, check_invariants
from specdec.measure.passcost import PassCosts

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"


@pytest.fixture(scope="module")
def plain(tiny_pair):
    return tokens(run_checked(tiny_pair, PROMPT, GenerationConfig(drafter="none", max_new_tokens=48)))


@pytest.mark.parametrize("k", [1, 2, 5, 8])
@pytest.mark.parametrize("drafter", ["model", "lookup", "auto"])
def test_speculative_equals_plain(tiny_pair, plain, k, drafter):
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(drafter=drafter, k=k, max_new_tokens=48))
    assert tokens(events) == plain
    assert sum(len(e.drafted) for e in events) > 0  # the drafter really proposed something


def test_adaptive_k_and_early_stop_keep_output(tiny_pair, plain):
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=2, k_policy="adaptive", draft_confidence=0.5, max_new_tokens=48))
    assert tokens(events) == plain
    assert len({e.k for e in events}) > 1  # K really moved


@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_max_new_tokens_smaller_than_k(tiny_pair, plain, drafter):
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(drafter=drafter, k=8, max_new_tokens=3))
    assert tokens(events) == plain[:3]
    assert events[-1].finish == "length"


def test_eos_inside_an_accepted_draft(tiny_pair, plain):
    # Declare as end-of-sequence a token that a draft proposed and the target accepted before the
    # end of its draft, so the run must stop inside the draft exactly where plain decoding stops.
    # The premise: the chosen token first occurs in the output at that place (so plain decoding
    # stops there too), and the target accepted more of that draft after it.
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=5, max_new_tokens=48))
    assert tokens(events) == plain
    candidates = [
        e.drafted[i] for e in events for i in range(e.accepted - 1)
        if plain.index(e.drafted[i]) == e.total_tokens - len(e.emitted) + i
    ]
    assert candidates, "no accepted draft token to turn into EOS"
    pair = replace(tiny_pair, eos_ids=frozenset({candidates[0]}))
    cut = plain.index(candidates[0]) + 1
    for drafter in ("model", "none"):
        events = run_checked(pair, PROMPT, GenerationConfig(drafter=drafter, k=5, max_new_tokens=48))
        assert tokens(events) == plain[:cut]
        assert events[-1].finish == "eos"
    spec = run_checked(pair, PROMPT, GenerationConfig(k=5, max_new_tokens=48))
    assert spec[-1].kind == EOS_ACCEPTED


def test_sampling_is_reproducible_with_a_seed(tiny_pair):
    config = GenerationConfig(temperature=1.0, top_p=0.9, k=4, seed=7, max_new_tokens=32)
    first = tokens(run_checked(tiny_pair, PROMPT, config))
    assert first == tokens(run_checked(tiny_pair, PROMPT, config))
    assert first != tokens(run_checked(tiny_pair, PROMPT, replace(config, seed=8)))


def test_text_pieces_join_to_the_decoded_output(tiny_pair):
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=4, max_new_tokens=48))
    decoded = tiny_pair.tokenizer.decode(tokens(events), skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert "".join(t for e in events for t in e.emitted_text) == decoded


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_tiny_random_acceptance_is_between_02_and_09(tiny_pair, temperature):
    from specdec.measure.metrics import summarize

    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=4, temperature=temperature, max_new_tokens=96))
    assert 0.2 < summarize(events).accepted_share < 0.9


# The cost K policy, with hand-made cost tables (specdec.core.k_policy has the unit tests).
SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
UNPROFITABLE = PassCosts(SIZES, tuple(0.01 * n for n in SIZES), 0.05, 200, 3)  # a draft pass dearer than 5 decode steps
# A free check and a draft pass of 0.8 decode steps: drafting pays only above an acceptance of about
# 0.8, below the draft model's recorded 0.59 and above its highest recorded, 0.89 (on code).
DEAR = PassCosts(SIZES, (0.01,) * len(SIZES), 0.008, 200, 3)
PROFITABLE = PassCosts(SIZES, (0.01,) * len(SIZES), 0.0001, 200, 3)  # a free check and a free draft


@pytest.mark.parametrize("costs, probed", [(DEAR, True), (UNPROFITABLE, False)], ids=["could-pay", "never-pays"])
def test_cost_policy_drafts_nothing_where_drafting_does_not_pay_and_probes_where_it_could(tiny_pair, plain, costs, probed):
    events = list(OurSource(tiny_pair, GenerationConfig(k=4, k_policy="cost", max_new_tokens=48)).run(PROMPT, costs=costs))
    check_invariants(events)
    assert tokens(events) == plain
    paused = [e for e in events if e.paused]
    assert events[0].paused and all(not e.drafted and e.k == 0 for e in paused)
    assert all(e.predicted_tok_s == pytest.approx(100.0) for e in paused)  # 1 / a one-token pass
    probes = [e.step for e in events if not e.paused]
    if probed:  # after 8 plain steps a K = 1 probe, then 16 plain steps before the next
        assert probes[:2] == [8, 25] and all(events[i].k == 1 for i in probes)
    else:  # not even every draft accepted would pay: no probe, and the reason says so
        assert probes == [] and all(e.paused_why.endswith("so no probe follows") for e in paused)


def test_cost_policy_drafts_where_drafting_pays(tiny_pair, plain):
    events = list(OurSource(tiny_pair, GenerationConfig(k=4, k_policy="cost", k_max=6, max_new_tokens=48)).run(PROMPT, costs=PROFITABLE))
    check_invariants(events)
    assert tokens(events) == plain and not any(e.paused for e in events)
    assert all(e.k > 0 and e.predicted_tok_s > 100.0 for e in events if e.total_tokens < 48 - 6)
    assert max(e.k for e in events) == 6  # a free check: the longest draft allowed


def test_cost_policy_recovers_through_its_probes(tiny_pair, plain, monkeypatch):
    """A run that starts sure its drafts fail (recorded alpha 0) drafts nothing, probes with K = 1
    after 8 plain steps, and drafts again once a probe is accepted (the check is free here)."""
    from specdec.core import k_policy

    monkeypatch.setattr(k_policy, "recorded_priors", lambda kind=None: {"model": 0.0, "lookup": 0.0, "head": 0.0})
    config = GenerationConfig(k=4, k_policy="cost", k_max=6, max_new_tokens=48)
    events = list(OurSource(tiny_pair, config).run(PROMPT, costs=PROFITABLE))
    check_invariants(events)
    assert tokens(events) == plain
    assert all(e.paused for e in events[:8]) and events[8].k == 1 and not events[8].paused  # the first probe
    first_accepted = next(e.step for e in events if e.accepted)
    assert events[first_accepted + 1].k > 1 and not any(e.paused for e in events[first_accepted + 1 :])


@pytest.mark.parametrize("drafter", ["model", "auto"])
def test_cost_policy_with_sampling_is_reproducible_whatever_the_clock_says(tiny_pair, monkeypatch, drafter):
    import itertools
    import time

    config = GenerationConfig(k=4, k_policy="cost", temperature=1.0, seed=3, max_new_tokens=48, drafter=drafter)
    first = list(OurSource(tiny_pair, config).run(PROMPT, costs=PROFITABLE))
    ticks = itertools.count()
    # a clock whose steps take wildly different times: the decisions must not see it
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks) ** 1.7 * 1e-3)
    second = list(OurSource(tiny_pair, config).run(PROMPT, costs=PROFITABLE))
    assert untimed(first) == untimed(second)


def test_cost_policy_measures_its_cost_table_when_none_is_given(tiny_pair, plain, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=4, k_policy="cost", max_new_tokens=48))
    assert tokens(events) == plain and all(e.predicted_tok_s > 0 for e in events)
    assert list((tmp_path / "costs").rglob("tiny-random.dense.dense.fp32.eager.json"))
