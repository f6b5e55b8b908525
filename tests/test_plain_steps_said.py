"""When the cost K policy chooses plain steps, the run says why in this machine's figures
("drafting would cost more than it saves here: c = ..., alpha = ..."), computed in specdec/ and laid
out by the step panel, a token's tooltip and the "Why this speedup" box. A run whose drafter is
recorded below break-even (translation-like acceptance 0.1) drafts on at most a few steps."""

import re

import pytest

from specdec.core import k_policy
from specdec.core.config import GenerationConfig
from specdec.core.detail import explain
from specdec.core.events import check_invariants
from specdec.engines.ours import OurSource
from specdec.measure.metrics import summarize
from specdec.measure.passcost import PassCosts
from tests.support.runs import tokens

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
# The AMD AVX-512 machine's shape (tests/data/costs_amd_avx512.json): a flat check, a draft at 0.57 of a step.
AMD = PassCosts(SIZES, tuple(0.068 * (1 + 0.027 * (n - 1)) for n in SIZES), 0.0388, 200, 3)


@pytest.fixture
def translation_like(monkeypatch):
    """Every drafter recorded at 0.1, as the drafts fare on text unlike the draft's training."""
    monkeypatch.setattr(k_policy, "recorded_priors", lambda kind=None: {"model": 0.1, "lookup": 0.1, "head": 0.1})


@pytest.fixture
def run(tiny_pair, translation_like):
    config = GenerationConfig(k=4, k_policy="cost", drafter="model", max_new_tokens=64)
    return list(OurSource(tiny_pair, config).run(PROMPT, costs=AMD))


def test_below_break_even_the_run_drafts_on_at_most_a_few_steps_and_says_why(run, tiny_pair):
    check_invariants(run)
    drafting = [e.step for e in run if e.drafted]
    assert len(drafting) <= 3 and 0 not in drafting, drafting  # only the scheduled probes
    plain = list(OurSource(tiny_pair, GenerationConfig(drafter="none", max_new_tokens=64)).run(PROMPT))
    assert tokens(run) == tokens(plain)  # greedy in fp32: the target's own text, drafted or not
    paused = [e for e in run if e.paused]
    assert paused and all(e.paused_why.startswith("drafting would cost more than it saves here: c = 0.57, \u03b1 = ") for e in paused)


def test_the_step_panel_the_tooltip_and_the_why_box_say_it(run):
    from app import render, step_panel, theory
    from app.view import paused_why

    first = run[0]
    assert first.paused
    panel = step_panel.render_panel(explain(first))
    assert "the K policy chose a plain step, since drafting would cost more than it saves here: c = 0.57" in panel
    shown = next(e for e in run if e.paused and "".join(e.emitted_text))  # a token with text of its own
    assert "drafting would cost more than it saves here: c = 0.57" in render.render_event(shown)
    spec = summarize([e for e in run if not e.drafted])  # a run where no step drafted
    box = theory.render_predictions(spec, summarize(run), True, paused_why(run))
    assert "Why this speedup" in box and "the K policy chose plain steps, since drafting would cost more" in box
    assert re.search(r"c = 0\.57, \u03b1 = 0\.\d\d, checking 2 tokens costs 1\.0\d decode steps", box), box  # the estimate after the probes
