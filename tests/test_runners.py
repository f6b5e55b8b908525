"""The static runner (and the compiled one: tests/test_compiled.py) emits exactly the eager runner's
events in fp32: the same tokens, drafts, acceptances, kinds and texts, and the same p, q and margins
up to the last bits of differently shaped passes. Also: its caches hold after every step what the
eager runner's hold, and the step panel stays on the eager runner."""

from dataclasses import replace

import pytest
import torch

from tests.support.runs import run_checked, tokens
from tests.support.runner_checks import assert_same_events, valid_slots
from specdec.core.config import GenerationConfig
from specdec.core.events import EOS_ACCEPTED
from specdec.core.proposers import model as model_proposer
from specdec.engines.ours import OurSource
from specdec.core.runners.eager_model import CachedModel
from specdec.measure.passcost import PassCosts

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
# A check that costs more the more it checks and a cheap draft: the cost policy moves K every few steps.
SLOPED = PassCosts(SIZES, tuple(0.01 * (1 + 0.3 * n) for n in SIZES), 0.003, 200, 3)


def draft_model_of(run):
    """The draft model a run's model proposer drafts with (the last of its proposers)."""
    return run.proposers[-1].lm


def both(pair, config, prompt=PROMPT, **kwargs):
    eager = run_checked(pair, prompt, replace(config, runner="eager"), **kwargs)
    static = run_checked(pair, prompt, replace(config, runner="static"), **kwargs)
    return eager, static


@pytest.mark.parametrize("config", [
    GenerationConfig(drafter="none", max_new_tokens=40),
    GenerationConfig(k=1, max_new_tokens=40),
    GenerationConfig(k=5, max_new_tokens=40),
    GenerationConfig(k=4, drafter="lookup", max_new_tokens=40),
    GenerationConfig(k=4, drafter="auto", max_new_tokens=40),
    GenerationConfig(k=2, k_policy="adaptive", k_max=12, max_new_tokens=40),
    GenerationConfig(k=6, draft_confidence=0.5, max_new_tokens=40),
], ids=["plain", "k1", "k5", "lookup", "auto", "adaptive", "early-stop"])
def test_static_emits_the_eager_events(tiny_pair, config):
    eager, static = both(tiny_pair, config)
    assert_same_events(static, eager)
    if config.drafter == "lookup":
        assert sum(len(e.drafted) for e in eager) > 0  # lookup found matches (tiny-random's text accepts none of them)
    elif config.drafter != "none":
        assert sum(e.accepted for e in eager) > 0 and any(e.accepted < len(e.drafted) for e in eager)  # both outcomes occur
    if config.draft_confidence:
        assert any(len(e.drafted) < e.k for e in eager)  # the draft really stopped early
    if config.drafter == "auto":
        assert {e.drafter for e in eager} == {"model", "lookup"}  # the draft model catches up after lookup's steps


@pytest.mark.parametrize("drafter", ["model", "auto"])
def test_static_emits_the_eager_events_under_the_cost_policy(tiny_pair, drafter):
    config = GenerationConfig(k=2, k_policy="cost", k_max=6, drafter=drafter, draft_confidence=0.4, max_new_tokens=40)
    eager, static = both(tiny_pair, config, costs=SLOPED)
    assert_same_events(static, eager)
    assert len({e.k for e in eager}) >= 2  # K moved (from the recorded acceptance it starts at, as the run's own counts came in)


@pytest.mark.parametrize("config", [
    GenerationConfig(k=6, draft_confidence=0.5, max_new_tokens=40),
    GenerationConfig(k=2, k_policy="cost", k_max=6, drafter="auto", draft_confidence=0.4, max_new_tokens=40),
], ids=["fixed", "cost-auto"])
def test_the_early_stop_decided_on_the_device_gives_the_eager_events(tiny_pair, monkeypatch, config):
    """As on a GPU (FREE_READS empty): the draft makes all K passes, the drafts past the stop count
    as not drafted, and the events are still the eager runner's."""
    eager = run_checked(tiny_pair, PROMPT, replace(config, runner="eager"), costs=SLOPED)  # stops read on the host
    monkeypatch.setattr(model_proposer, "FREE_READS", ())
    static = run_checked(tiny_pair, PROMPT, replace(config, runner="static"), costs=SLOPED)
    assert_same_events(static, eager)
    assert any(len(e.drafted) < e.k for e in eager)  # the draft really stopped early


def test_static_stops_inside_an_accepted_draft_at_end_of_sequence(tiny_pair):
    # As in test_parity: a token the target accepted inside a draft, first seen there, becomes EOS.
    plain = tokens(run_checked(tiny_pair, PROMPT, GenerationConfig(drafter="none", max_new_tokens=40)))
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=5, max_new_tokens=40, runner="static"))
    candidates = [e.drafted[i] for e in events for i in range(e.accepted - 1)
                  if plain.index(e.drafted[i]) == e.total_tokens - len(e.emitted) + i]
    assert candidates, "no accepted draft token to turn into EOS"
    pair = replace(tiny_pair, eos_ids=frozenset({candidates[0]}))
    eager, static = both(pair, GenerationConfig(k=5, max_new_tokens=40))
    assert_same_events(static, eager)
    assert static[-1].kind == EOS_ACCEPTED and static[-1].finish == "eos"


@pytest.mark.parametrize("max_new_tokens", [1, 3, 7])
def test_static_cuts_a_step_at_max_new_tokens(tiny_pair, max_new_tokens):
    eager, static = both(tiny_pair, GenerationConfig(k=8, max_new_tokens=max_new_tokens))
    assert_same_events(static, eager)
    assert static[-1].finish == "length" and static[-1].total_tokens == max_new_tokens


@pytest.mark.parametrize("config, free_reads", [
    (GenerationConfig(k=4, max_new_tokens=24), ("cpu",)),
    (GenerationConfig(k=4, drafter="auto", max_new_tokens=24), ("cpu",)),
    (GenerationConfig(k=6, draft_confidence=0.5, max_new_tokens=24), ("cpu",)),
    (GenerationConfig(k=6, draft_confidence=0.5, max_new_tokens=24), ()),
], ids=["greedy", "auto", "early-stop", "early-stop-on-the-device"])
def test_static_caches_hold_the_eager_caches_after_every_step(tiny_pair, config, free_reads, monkeypatch):
    """After every step the valid slots of both static caches (the target: the sequence but its last
    token; the draft: what it has fed) equal the eager caches' at the same positions."""
    monkeypatch.setattr(model_proposer, "FREE_READS", free_reads)
    eager = OurSource(tiny_pair, replace(config, runner="eager")).run(PROMPT)
    static = OurSource(tiny_pair, replace(config, runner="static")).run(PROMPT)
    steps = 0
    for e_event, s_event in zip(eager, static):
        assert e_event.emitted == s_event.emitted
        assert static.target.length == eager.target.length == len(static.seq) - 1
        eager_draft, static_draft = draft_model_of(eager), draft_model_of(static)
        assert static_draft.length == eager_draft.length  # the same proposer feeds both the same tokens
        shared = eager_draft.length  # 0 until the draft model first drafts (it reads the prompt then)
        pairs = [(valid_slots(static.target, static.target.length), valid_slots(eager.target, eager.target.length))]
        if shared:
            pairs.append((valid_slots(static_draft, shared), valid_slots(eager_draft, shared)))
        for got, want in pairs:
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
        steps += 1
    assert steps > 3


def test_the_step_panel_runs_eager_whatever_the_setting(tiny_pair):
    run = OurSource(tiny_pair, GenerationConfig(k=3, max_new_tokens=8, runner="static")).run(PROMPT, detailed=True)
    events = list(run)
    assert isinstance(run.target, CachedModel) and len(run.details) == len(events)


def test_a_static_model_feeds_any_number_of_tokens_in_its_fixed_shapes(tiny_pair):
    """forward() (the cost table's passes, the draft's catch-up after prompt lookup's steps) cuts a
    feed into pieces of at most the largest shape, each padded: the logits are those of one pass."""
    from specdec.core.runners.static_model import LARGEST, StaticModel

    encoded = tiny_pair.tokenizer.encode(PROMPT * 3)
    ids = torch.tensor(encoded, device=tiny_pair.device)[: LARGEST + 9]  # two pieces: 33 and 9 (padded to 12)
    eager, static = CachedModel(tiny_pair.target, tiny_pair.vocab_size), StaticModel(tiny_pair.target, tiny_pair.vocab_size)
    static.reserve(len(ids))
    eager.prefill(ids[:5])
    static.prefill(ids[:5])
    torch.testing.assert_close(static.forward(ids[5:], last_only=False), eager.forward(ids[5:], last_only=False), atol=1e-4, rtol=1e-4)
    assert static.length == eager.length == len(ids)
    static.crop(7)
    eager.crop(7)
    torch.testing.assert_close(static.forward(ids[7:10], last_only=True), eager.forward(ids[7:10], last_only=True), atol=1e-4, rtol=1e-4)


@pytest.mark.all_threads
def test_static_emits_the_eager_events_on_the_embedded_pair():
    """The real pair in fp32 (skipped where it is not converted): a few steps of each runner agree."""
    from specdec.models import bundle
    from specdec.models.pair import load_pair
    from specdec.models.presets import DEFAULT_PAIR

    if not bundle.is_converted():
        pytest.skip("embedded pair not converted: python -m specdec prepare")
    pair = load_pair(DEFAULT_PAIR, dtype="fp32")
    prompt = "Write a Python function `is_prime(n)` that returns True when n is a prime number."
    eager, static = both(pair, GenerationConfig(k=4, max_new_tokens=12), prompt=prompt)
    assert_same_events(static, eager)
    assert sum(e.accepted for e in eager) > 0


def test_a_model_spread_over_devices_runs_eager_with_one_line(tiny_pair, caplog):
    """A static cache lives on one device and a CUDA graph cannot span several: such a model is lent eager."""
    import copy
    import logging

    from specdec.core.runners import runner_model
    from specdec.core.runners.eager_model import EagerModels
    from specdec.core.runners.static_model import StaticModels

    spread = copy.deepcopy(tiny_pair.draft)
    spread.model.layers[0].to("meta")  # a second device, as device_map="auto" makes on several GPUs
    with caplog.at_level(logging.WARNING, logger="specdec.runners"):
        lender = runner_model("static", spread, tiny_pair.vocab_size)
    assert isinstance(lender, EagerModels)
    assert [r.getMessage() for r in caplog.records] == [
        "specdec: the static runner runs eager for this model: its weights are spread over cpu, meta"]
    assert isinstance(runner_model("static", tiny_pair.draft, tiny_pair.vocab_size), StaticModels)  # one device: as asked


@pytest.mark.parametrize("runner", ["eager", "static"])
def test_the_draft_model_reads_the_prompt_only_when_it_first_drafts(tiny_pair, runner):
    """Where the cost policy never has the draft model draft (a draft pass costing ten target steps),
    the run never feeds it the prompt; where it drafts, the first drafting step feeds it first."""
    pricey = PassCosts(SIZES, tuple(0.01 for _ in SIZES), 0.1, 200, 3)
    config = GenerationConfig(drafter="model", k_policy="cost", max_new_tokens=6, runner=runner)
    run = OurSource(tiny_pair, config).run(PROMPT, costs=pricey)
    events = list(run)
    assert len(events) == 6 and not any(e.drafted for e in events)  # six plain steps: no probe before eight
    assert draft_model_of(run).length == 0
    run = OurSource(tiny_pair, replace(config, max_new_tokens=12)).run(PROMPT, costs=SLOPED)
    prompt_length = len(run.seq)
    events = list(run)
    assert events[0].drafted and draft_model_of(run).length >= prompt_length
