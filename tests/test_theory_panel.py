"""The theory box, tab figures and step panel: every shown number is the metric's, text is escaped."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from app import step_panel, theory, theory_charts
from specdec.core.config import GenerationConfig
from specdec.core.detail import Candidate, Position, StepDetail, Token, explain
from specdec.core.events import BONUS, CORRECTION, PLAIN
from specdec.measure.metrics import measured_speedup, summarize, summarize_runs
from specdec.measure.passcost import PassCosts
from specdec.core.theory import best_k, speedup_curve

from tests.support.events import XSS, make_events


@pytest.fixture
def runs():
    spec = make_events([(["a", "b", "c"], 3, "d", BONUS), (["e", "f", "g"], 1, "h", CORRECTION), (["i", "j", "k"], 2, "l", CORRECTION)])
    plain = make_events([([], 0, t, PLAIN) for t in "abcdefghi"])
    return spec, plain


def test_predictions_box_shows_the_metrics_own_numbers(runs):
    spec_events, plain_events = runs
    spec, plain = summarize_runs(spec_events, plain_events), summarize(plain_events)
    html = theory.render_predictions(spec, plain, finished=True)
    shown = dict(re.findall(r'<tr class="pred-([\w_]+)"><th>[^<]*</th><td class="num">([\d.]+)\u00d7', html))
    assert shown == {
        "measured": f"{measured_speedup(spec, plain):.2f}",
        "textbook": f"{spec.predicted_speedup:.2f}",
        "with_verify_cost": f"{spec.predicted_speedup_with_verify_cost:.2f}",
        "from_passes": f"{spec.predicted_speedup_from_passes:.2f}",
    }
    assert "explains the measured" in html
    # Until both runs have ended (or without plain decoding) there is nothing to compare.
    assert theory.render_predictions(spec, plain, finished=False) == theory.WAITING
    assert theory.render_predictions(summarize(spec_events), None, finished=True) == theory.WAITING


def test_verdict_names_the_closest_prediction_and_the_gaps():
    from types import SimpleNamespace

    from specdec.core.theory import PredictionGap

    gap = PredictionGap(measured=1.5, textbook=1.2, with_verify_cost=0.9, from_passes=1.48, verify_factor=0.75,
                        burst_factor=1.64, unexplained=1.5 / 1.48)
    m = SimpleNamespace(verify_cost=1.9, tokens_per_pass=4.6, expected_tokens_per_pass=2.8, alpha=0.7)
    text = theory.verdict(gap, m)
    assert text.startswith("The accounting from passes explains the measured 1.50\u00d7 best (within 1%)")
    assert "1.90 decode steps" in text and "4.60 tokens" in text and "2.80" in text and "no hidden cost" in text
    exact = PredictionGap(measured=2.9, textbook=2.95, with_verify_cost=2.91, from_passes=2.9003, verify_factor=0.99,
                          burst_factor=1.0, unexplained=2.9 / 2.9003)
    assert "2.90\u00d7 best (equal to it, to rounding)" in theory.verdict(exact, m)  # not "within 0%"


def test_k_curve_is_specdec_theory(runs):
    spec_events, plain_events = runs
    m = summarize_runs(spec_events, plain_events)
    costs = PassCosts((1, 2, 4, 8, 16, 32), (0.2, 0.2, 0.22, 0.26, 0.33, 0.46), 0.1, 100, 3)
    fig = theory_charts.k_curve_figure(m, costs, (), 3, 1.4)
    names = [t.name for t in fig.data]
    textbook, solid = fig.data[0], fig.data[1]
    assert list(textbook.y) == pytest.approx(speedup_curve(m.alpha, m.cost_ratio_c, lambda k: 1.0, theory_charts.KS))
    assert list(solid.y) == pytest.approx(speedup_curve(m.alpha, m.cost_ratio_c, costs.verify_cost, theory_charts.KS))
    assert f"best K = {best_k(theory_charts.KS, list(solid.y))}" in names and "this run" in names
    fig.to_json()


def test_codesign_map_has_contours_and_points():
    point = theory.DrafterPoint("draft model K=5", 0.7, 0.25, "hover")
    fig = theory_charts.codesign_figure(5, 1.2, [point])
    assert [t.type for t in fig.data] == ["contour", "contour", "scatter"]
    assert list(fig.data[2].x) == [0.7] and list(fig.data[2].text) == ["draft model K=5"]
    assert len(theory_charts.codesign_figure().data) == 0  # before any run: empty, titled
    fig.to_json()


def test_session_keeps_one_point_per_drafter_run(runs):
    spec_events, plain_events = runs
    session = theory.TheorySession()
    m = summarize_runs(spec_events, plain_events)
    session.record(m, summarize(plain_events), GenerationConfig(k=3), ("tiny-random", "fp32"))
    session.record(replace(m, cost_ratio_c=0.0), None, GenerationConfig(k=3, drafter="lookup"), ("tiny-random", "fp32"))
    assert [p.label for p in session.points] == ["#1 draft model K=3 [dense]", "#2 prompt lookup K=3 [dense]"]  # [the target kernel]
    assert session.k == 3 and session.speedup is None
    import copy

    assert copy.deepcopy(session).points == []  # Gradio's per-session copy starts empty


def test_passcost_caption_and_figure():
    costs = PassCosts((1, 2, 4, 8), (0.2, 0.2, 0.22, 0.26), 0.1, 100, 3)
    text = theory.passcost_caption(costs, 5)
    assert "K+1 = 6 tokens costs 1.20 decode steps" in text and "memory-bound" in text and "c = 0.500" in text
    fig = theory_charts.passcost_figure(costs, 5)
    assert list(fig.data[0].y) == pytest.approx([200, 200, 220, 260])


def detail_for(event, drawn_text="<b>"):
    cands = (Candidate(7, drawn_text, 0.5, 0.1, 0.8), Candidate(101, XSS[0], 0.1, 0.6, 0.0))
    positions = tuple(Position((Token(7, XSS[1], 0.5),), (Token(101, XSS[2], 0.6),), 1.0) for _ in range(len(event.drafted) + 1))
    return StepDetail(event.step, False, positions, (0.1,) * len(event.drafted), event.accepted, cands, 7)


@pytest.mark.parametrize("evil", XSS)
def test_step_panel_escapes_model_text(evil):
    event = make_events([([evil, evil], 1, evil, CORRECTION)])[0]
    for detail in (None, detail_for(event, evil)):
        html = step_panel.render_panel(explain(event, detail))
        for dangerous in ["<script", "<img", 'onmouseover="']:
            assert dangerous not in html


def test_step_panel_rows_follow_the_verdicts():
    event = make_events([(["a", "b", "c"], 1, "X", CORRECTION)])[0]
    html = step_panel.render_panel(explain(event, detail_for(event)))
    assert re.findall(r'data-verdict="(\w+)"', html) == ["accepted", "rejected", "discarded"]
    assert "u = 0.100 &lt; 0.625" in html and "u = 0.100 \u2265" in html  # sampled: u against min(1, p/q)
    assert "residual" in html and 'class="cand drawn"' in html and "the rejected draft" in html
    bonus = make_events([(["a", "b"], 2, "Y", BONUS)])[0]
    html = step_panel.render_panel(explain(bonus, detail_for(bonus)))
    assert "Bonus" in html and "<th>residual</th>" not in html and "<th>p_draft</th>" not in html.split("dist-table")[1]
    html = step_panel.render_panel(explain(event))  # a run that was not stepped: the event alone
    assert "recorded only for a stepped run" in html and "kept with probability 0.625" in html


def test_held_run_detail_only_for_the_run_shown():
    session = step_panel.StepSession()
    assert session.detail(0, []) is None
    session.close()  # nothing held: a no-op
    import copy

    assert copy.deepcopy(session) is not session and copy.deepcopy(session).events is None


def test_one_cost_curve_per_kernel_and_a_sentence_on_where_drafting_pays():
    flat = PassCosts((1, 2, 6), (0.2, 0.2, 0.21), 0.03, 200, 3)  # checking 6 tokens costs about one decode step
    dear = PassCosts((1, 2, 6), (0.05, 0.07, 0.17), 0.03, 200, 3)  # cheap decode step, a check that grows with its tokens
    fig = theory_charts.passcost_figure(flat, 5, tables={"dense": flat, "q4k": dear})
    assert [t.name for t in fig.data] == ["dense", "q4k"]
    assert list(fig.data[1].y) == pytest.approx([50, 70, 170])
    text = theory.passcost_caption(flat, 5, {"dense": flat, "q4k": dear}, alpha=0.7)
    assert "**dense**: decode step 200 ms, checking 6 tokens costs 1.05 of them" in text
    assert "**q4k**: decode step 50 ms, checking 6 tokens costs 3.40 of them; at \u03b1 = 0.70 drafting does not pay (K = 0)" in text
    assert "dense**: decode step 200 ms, checking 6 tokens costs 1.05 of them; at \u03b1 = 0.70 the best K is" in text
    assert "its limit" not in text  # these tables carry no bytes or read rate


def test_each_kernel_is_shown_beside_its_physical_limit():
    from dataclasses import replace

    costs = PassCosts((1, 2, 6), (0.066, 0.07, 0.08), 0.03, 200, 3, streamed_bytes=1_076_000_000, read_rate=32.0e9)
    text = theory.passcost_caption(None, 5, {"w4a8": costs, "llama.cpp": replace(costs, streamed_bytes=None)})
    assert "**w4a8**: decode step 66 ms (2.0\u00d7 its limit of 34 ms: 1.08 GB at 32 GB/s), checking 6 tokens" in text
    assert "**llama.cpp**: decode step 66 ms, checking" in text  # no bytes: no limit claimed
    assert "no step can be faster" in text


def test_break_even_lines_of_other_kernels_on_the_codesign_map():
    from specdec.core.theory import predicted_speedup

    fig = theory_charts.codesign_figure(5, 1.0, [], break_even={"q4k": 3.4})
    line = next(t for t in fig.data if t.name.startswith("q4k"))
    for a, c in list(zip(line.x, line.y))[10:90:20]:
        assert predicted_speedup(a, 5, c, 3.4) == pytest.approx(1.0)  # on the line the drafts exactly break even


def test_a_llamacpp_run_is_placed_by_llamacpps_own_costs(runs):
    from specdec.core.events import StepEvent
    from specdec.measure.metrics import summarize

    events = [StepEvent(0, (), 0, (1,), "plain", None, None, None, None, 1, 0.1, ("a",), (), None, engine="llama.cpp"),
              StepEvent(1, (2, 3), 2, (2, 3, 4), "correction", None, None, None, None, 4, 0.3, ("b", "c", "d"), ("b", "c"),
                        None, k=5, engine="llama.cpp", unseen_rejected=3)]
    key = ("tiny-random", "fp32")
    theory.KERNEL_COSTS[key] = {"llama.cpp": PassCosts((1, 6), (0.04, 0.14), 0.01, 200, 3)}
    try:
        session = theory.TheorySession()
        session.record(summarize(events), None, GenerationConfig(k=5), key, engine="llama.cpp")
        assert session.kernel == "llama.cpp" and len(session.points) == 1
        assert session.points[0].c == pytest.approx(0.25) and session.points[0].label.startswith("#1 llama.cpp")
    finally:
        theory.KERNEL_COSTS.pop(key, None)
