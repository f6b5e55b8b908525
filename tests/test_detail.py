"""The step panel's data: recording a step changes nothing, stepping equals running, and what is
shown (u, residual, the target's choices) is what the rules used."""

from dataclasses import replace

import pytest
import torch

import specdec.core.acceptance as acceptance
from tests.support.runs import run_checked, untimed
from specdec.core.acceptance import speculative_sample
from specdec.core.config import GenerationConfig
from specdec.core.detail import ACCEPTED, DISCARDED, REJECTED, Decided, Scored, explain, record_step, replay_uniforms
from specdec.engines.ours import OurSource
from specdec.core.events import CORRECTION

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
V = 10

SETTINGS = [
    GenerationConfig(max_new_tokens=30, k=4),
    GenerationConfig(max_new_tokens=30, k=4, temperature=0.9, seed=7),
    GenerationConfig(max_new_tokens=30, k=3, temperature=1.2, top_p=0.9, seed=1, drafter="auto", k_policy="adaptive"),
    GenerationConfig(max_new_tokens=30, k=5, temperature=0.7, seed=2, drafter="lookup"),
]


@pytest.mark.parametrize("config", SETTINGS, ids=["greedy", "sampled", "auto-adaptive-top-p", "lookup-sampled"])
def test_stepping_with_detail_equals_an_uninterrupted_run(tiny_pair, config):
    running = run_checked(tiny_pair, PROMPT, config)
    stepped = OurSource(tiny_pair, config).run(PROMPT, detailed=True)
    it = iter(stepped)
    events = [next(it) for _ in range(3)]  # three single steps, as the Step button takes them
    events += list(it)  # then "Run to end"
    assert untimed(events) == untimed(running)
    assert [d.step for d in stepped.details] == [e.step for e in events]


def test_recorded_draws_and_choices_match_the_verdicts(tiny_pair):
    for config in SETTINGS:
        decoding = OurSource(tiny_pair, config).run(PROMPT, detailed=True)
        events = list(decoding)
        for event, detail in zip(events, decoding.details):
            x = explain(event, detail)
            assert [r.verdict for r in x.rows] == [ACCEPTED] * event.accepted + (
                [REJECTED] + [DISCARDED] * (len(event.drafted) - event.accepted - 1) if event.accepted < len(event.drafted) else [])
            if event.greedy:
                for r, token in zip(x.rows, event.drafted):
                    choice = detail.positions[r.index].choice.id
                    if r.verdict == ACCEPTED:
                        assert choice == token
                    if r.verdict == REJECTED:
                        assert choice != token and choice == event.emitted[-1]
            else:
                for r in x.rows:  # kept exactly when u < min(1, p/q)
                    if r.verdict == ACCEPTED:
                        assert r.u < r.accept_prob
                    if r.verdict == REJECTED:
                        assert r.u >= r.accept_prob
            if event.kind == CORRECTION:
                assert detail.at == event.accepted and detail.drawn == event.emitted[-1]


def test_explain_without_a_detail_uses_what_the_event_holds(tiny_pair):
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(max_new_tokens=30, k=4))
    rejected = next(e for e in events if e.kind == CORRECTION)
    x = explain(rejected)
    assert x.detail is None and x.token_text == rejected.emitted_text[-1]
    row = x.rows[rejected.accepted]
    assert row.verdict == REJECTED and row.target_choice == rejected.emitted_text[-1]
    assert row.margin == rejected.margins[rejected.accepted]
    with pytest.raises(ValueError, match="detail of step"):
        explain(rejected, replace(generate_detail(tiny_pair), step=rejected.step + 1))


def generate_detail(pair):
    decoding = OurSource(pair, GenerationConfig(max_new_tokens=4, k=2)).run(PROMPT, detailed=True)
    list(decoding)
    return decoding.details[0]


def dist(mass: dict[int, float]) -> torch.Tensor:
    row = torch.zeros(V)
    for i, m in mass.items():
        row[i] = m
    return row / row.sum()


def test_residual_shown_is_what_speculative_sample_drew_from(monkeypatch):
    # Draft 0 is kept (p >= q); draft 1 (token 6) is rejected for sure (p = 0 there): the target
    # then samples from normalise(max(0, p1 - q1)) = {2: 0.3/0.5, 8: 0.2/0.5}.
    p = torch.stack([dist({3: 0.9, 1: 0.1}), dist({2: 0.4, 8: 0.3, 5: 0.3}), dist({0: 1.0})])
    q = torch.stack([dist({3: 0.5, 5: 0.5}), dist({2: 0.1, 8: 0.1, 5: 0.3, 6: 0.5})])
    draft_ids = torch.tensor([3, 6])
    drawn_from = []
    real_race = acceptance.race_sample
    monkeypatch.setattr(acceptance, "race_sample", lambda probs, g: drawn_from.append(probs[0].clone()) or real_race(probs, g))
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    n, token = speculative_sample(draft_ids, p, q, generator)
    monkeypatch.undo()
    u = replay_uniforms(state, 2, "cpu")
    detail = record_step(Scored(draft_ids, q, p.log(), p), Decided(0, int(n), int(token), u, greedy=False), top_n=V)
    assert (detail.at, detail.drawn) == (1, int(token)) and int(token) in (2, 8)
    (used,) = drawn_from
    shown = torch.zeros(V)
    for c in detail.candidates:
        shown[c.id] = c.residual
        assert (c.p, c.q) == (pytest.approx(float(p[1, c.id])), pytest.approx(float(q[1, c.id])))
    assert torch.allclose(shown, used) and torch.allclose(used, dist({2: 0.6, 8: 0.4}))
    # The replayed draws are the ones the rule compared: draft 0 kept (u < 1), draft 1 rejected.
    assert u[0] * float(q[0, 3]) < float(p[0, 3]) and not u[1] * float(q[1, 6]) < float(p[1, 6])


def test_bonus_detail_is_the_target_distribution():
    p = torch.stack([dist({3: 1.0}), dist({4: 0.7, 9: 0.3})])
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    n, token = speculative_sample(torch.tensor([3]), p, None, generator)
    u = replay_uniforms(state, 1, "cpu")
    detail = record_step(Scored(torch.tensor([3]), None, p.log(), p), Decided(0, int(n), int(token), u, greedy=False), top_n=V)
    assert detail.at == 1 and detail.positions[0].draft_top is None  # prompt lookup: q is one-hot
    assert {c.id: c.residual for c in detail.candidates if c.p > 0} == pytest.approx({4: 0.7, 9: 0.3})
    assert all(c.q == 0 for c in detail.candidates)
