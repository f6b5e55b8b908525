"""Greedy speculative output is token-identical to greedy plain output (fp32, tiny-random)."""

from dataclasses import replace

import pytest

from conftest import run_checked, tokens
from specdec.config import GenerationConfig
from specdec.events import EOS_ACCEPTED

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
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=2, adaptive_k=True, draft_confidence=0.5, max_new_tokens=48))
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
    from specdec.metrics import summarize

    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=4, temperature=temperature, max_new_tokens=96))
    assert 0.2 < summarize(events).acceptance_rate < 0.9


def test_unprofitable_drafting_pauses_and_output_stays(tiny_pair, plain, monkeypatch):
    from specdec import engine

    # Make every drafting step look slower than a plain step would be: drafting never pays.
    real = engine.DraftLength.update
    monkeypatch.setattr(engine.DraftLength, "update",
                        lambda self, d, a, ds=0.0, vs=0.0: real(self, d, a, ds + (10.0 if d else 0.0), vs))
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=4, pause_unprofitable=True, max_new_tokens=48))
    assert tokens(events) == plain
    paused = [e for e in events if e.paused]
    window = engine.DraftLength.WINDOW
    assert paused and all(not e.drafted and e.k == 0 for e in paused)
    assert not any(e.paused for e in events[:window])  # judged only after a full window of drafting steps
    assert events[window].paused and not events[window + engine.DraftLength.PAUSE].paused  # then tried again
    assert events[window + engine.DraftLength.PAUSE].k == 1


def test_profitable_drafting_never_pauses(tiny_pair, plain, monkeypatch):
    from specdec import engine

    real = engine.DraftLength.update
    # Free drafts and one fixed pass time (a power of two, so sums are exact): a drafting step makes
    # at least one token per pass, as a plain step does, whatever the machine's timing.
    monkeypatch.setattr(engine.DraftLength, "update", lambda self, d, a, ds=0.0, vs=0.0: real(self, d, a, 0.0, 2.0**-10))
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=4, pause_unprofitable=True, max_new_tokens=48))
    assert tokens(events) == plain and not any(e.paused for e in events)
