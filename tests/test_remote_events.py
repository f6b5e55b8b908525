"""Events from a real engine read over HTTP (llama.cpp, vLLM): they name only the accepted drafts,
count the rejected ones, and leave p, q, margins and the draft/verify seconds None. Every reader
(contract check, metrics, record, panes, charts, step panel) copes, and never invents them."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from app import charts
from app.render import render_event, render_tokens
from app.step_panel import render_panel
from specdec.record import run_file as rec
from specdec.measure.compare import first_difference
from specdec.core.config import GenerationConfig
from specdec.core.detail import explain
from specdec.core.events import BONUS, CORRECTION, PLAIN, StepEvent, check_invariants
from specdec.measure.metrics import summarize, summarize_runs


def remote(steps: list[tuple[int, int, list[str]]], engine: str = "llama.cpp", dt: float = 0.1) -> list[StepEvent]:
    """(drafted, accepted, texts of the emitted tokens) per step -> events as a remote engine gives them."""
    events, total, ids = [], 0, iter(range(100, 10_000))
    for i, (drafted, accepted, texts) in enumerate(steps):
        emitted = tuple(next(ids) for _ in texts)
        kind = PLAIN if not drafted else BONUS if accepted == drafted else CORRECTION
        total += len(emitted)
        events.append(StepEvent(
            step=i, drafted=emitted[:accepted], accepted=accepted, emitted=emitted, kind=kind,
            p_target=None, p_draft=None, draft_s=None, verify_s=None, total_tokens=total,
            elapsed_s=dt * (i + 1), emitted_text=tuple(texts), drafted_text=tuple(texts[:accepted]), margins=None,
            k=drafted, drafter="model" if drafted else "", engine=engine, unseen_rejected=drafted - accepted))
    return events


SPEC = remote([(0, 0, ["def"]), (5, 5, [" f", "(", "x", ")", ":", "\n"]), (5, 2, [" ", " return", " <b>"]), (5, 0, [" x"])])
PLAIN_RUN = remote([(0, 0, [t]) for t in ["def", " f", "(", "x", ")", ":", "\n", " ", " return", " <b>", " x"]], dt=0.05)


def test_remote_events_keep_the_contract():
    check_invariants(SPEC)
    check_invariants(PLAIN_RUN)
    assert [e.n_drafted for e in SPEC] == [0, 5, 5, 5]
    assert [e.n_rejected for e in SPEC] == [0, 0, 3, 5]
    assert SPEC[2].rejected == () and SPEC[2].accept_probs is None


@pytest.mark.parametrize("change, message", [
    (dict(kind=BONUS), "bonus needs every draft accepted"),  # 2 of 5 kept is not a bonus
    (dict(unseen_rejected=0), "correction needs a rejection"),  # 2 of 2 kept cannot be a correction
    (dict(unseen_rejected=-1), "unseen_rejected"),
    (dict(margins=(0.5,)), "margins length"),
    (dict(p_target=(0.9,), p_draft=(0.8, 0.7)), "p_target length"),
])
def test_check_invariants_catches_broken_remote_steps(change, message):
    from dataclasses import replace

    broken = [*SPEC[:2], replace(SPEC[2], **change), SPEC[3]]
    with pytest.raises(AssertionError, match=message):
        check_invariants(broken)


def test_plain_step_with_unseen_drafts_is_refused():
    from dataclasses import replace

    with pytest.raises(AssertionError, match="plain step with drafts"):
        check_invariants([replace(SPEC[0], unseen_rejected=2)])


def test_metrics_count_unseen_drafts_and_leave_untimed_costs_none():
    m = summarize_runs(SPEC, PLAIN_RUN)
    assert (m.tokens, m.target_passes, m.drafted, m.accepted, m.rejections) == (11, 4, 15, 7, 2)
    assert m.accepted_share == pytest.approx(7 / 15)
    assert m.alpha == pytest.approx(7 / 9)
    assert m.mean_k == 5
    assert m.draft_pass_s is None and m.verify_pass_s is None and m.target_pass_s is None
    assert m.cost_ratio_c is None and m.verify_cost is None and m.predicted_speedup is None
    assert m.seconds == pytest.approx(0.4) and m.step_s == pytest.approx(0.1)  # from the arrival times
    assert m.decode_step_s == pytest.approx(0.05) and m.decode_step_from == "the plain run"
    assert m.predicted_speedup_from_passes == pytest.approx(11 / 4 * 0.05 / 0.1)
    plain = summarize(PLAIN_RUN)
    assert plain.drafted == 0 and plain.tokens_per_s == pytest.approx(11 / 0.55)


def test_pane_shows_a_count_where_the_text_is_unknown():
    html = render_event(SPEC[2])
    chip = re.search(r'<span class="tok tok-rejected tok-unseen" data-step="2" title="([^"]*)">\u00d73</span>', html)
    assert chip, html
    assert "drafted 3 more tokens here and rejected them without sending their text" in chip.group(1)
    assert "llama.cpp" in chip.group(1)
    assert "\u00d75" in render_event(SPEC[3]) and "\u00d7" not in render_event(SPEC[1])
    assert "tok-unseen" not in render_event(SPEC[2], show_rejected=False)
    assert "&lt;b&gt;" in render_tokens(SPEC) and "<b>" not in render_tokens(SPEC)  # escaped always
    assert "top-2 logit" not in html and "p_target" in render_event(SPEC[1])  # says p is not reported


def test_engine_name_is_escaped_in_the_chip():
    from dataclasses import replace

    html = render_event(replace(SPEC[2], engine="<x>"))
    assert "<x>" not in html and "&lt;x&gt;" in html


def test_charts_count_unseen_rejections():
    fig = charts.acceptance_figure(SPEC)
    accepted, rejected, rate = fig.data
    assert list(rejected.y) == [0, 0, 3, 5] and list(accepted.y) == [0, 5, 2, 0]
    assert rate.y[-1] == pytest.approx(7 / 15)
    counts = charts.tokens_per_pass_figure(SPEC).data[0]
    assert dict(zip(counts.x, counts.y))[6] == 1
    assert list(charts.throughput_figure(SPEC, PLAIN_RUN).data[0].y) == [0, 1, 7, 10, 11]


def test_step_panel_says_what_the_engine_does_not_report():
    html = render_panel(explain(SPEC[2]))
    assert "proposed 5 tokens; the target kept 2" in html
    assert "\u00d73" in html and "does not send rejected draft tokens" in html
    assert "not the rejected draft tokens&#x27; text, not p_target or p_draft, and not the draft and verify seconds apart" in html
    assert "press <b>Step</b>" not in html  # a remote run cannot be stepped: no promise of distributions
    ours = render_panel(explain(remote([(3, 1, ["a", "b"])], engine="specdec")[0]))
    assert "does not report" not in ours.split("</table>")[-1]


def test_record_round_trip_keeps_remote_events():
    record = rec.RunRecord(prompt="p", config=GenerationConfig(max_new_tokens=16, k=5), pair={"name": "llama.cpp", "dtype": "Q4_K_M"},
                           machine={}, spec=SPEC, plain=PLAIN_RUN, created=rec.now_utc())
    text = rec.to_json(record)
    back = rec.from_json(text)
    assert back.spec == SPEC and back.plain == PLAIN_RUN
    metrics = json.loads(text)["metrics"]
    assert metrics["speculative"]["drafted"] == 15 and metrics["speculative"]["cost_ratio_c"] is None
    assert metrics["identical_to_plain"] is True
    rows = list(csv.DictReader(io.StringIO(rec.to_csv(record))))
    assert (rows[2]["drafted"], rows[2]["accepted"], rows[2]["rejected"]) == ("5", "2", "3")
    assert rows[2]["draft_s"] == rows[2]["verify_s"] == rows[2]["rejected_text"] == ""


def test_first_difference_without_margins():
    from dataclasses import replace

    other = [*PLAIN_RUN[:3], replace(PLAIN_RUN[3], emitted=(7,), emitted_text=("y",)), *PLAIN_RUN[4:]]
    d = first_difference(SPEC, other)
    assert d.index == 3 and d.margin is None and d.is_tie is None


def test_theory_tab_copes_with_a_remote_run():
    from app import theory, theory_charts
    from specdec.measure.metrics import measured_speedup

    spec, plain = summarize_runs(SPEC, PLAIN_RUN), summarize(PLAIN_RUN)
    session = theory.TheorySession()
    session.record(spec, plain, GenerationConfig(k=5), None)
    assert session.points == [] and session.k == 5  # no c: no point on the co-design map, but K is known
    assert session.speedup == pytest.approx(measured_speedup(spec, plain))
    assert "appears after a speculative run" in theory.k_caption(session)  # no c, no curve to describe
    assert "appears after a speculative run" in theory.codesign_caption(session)
    assert theory.render_predictions(spec, plain, finished=True) == theory.WAITING  # the predictions need c
    assert len(theory_charts.k_curve_figure(spec).data) == 0
