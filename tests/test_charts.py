"""app.charts: expected traces, points and colours; empty inputs give titled, empty figures."""

from __future__ import annotations

import pytest

from app import palette
from app.charts import (HEIGHT, accepted_lengths_figure, acceptance_figure, position_figure, throughput_figure,
                        tokens_per_pass_figure)
from specdec.core.events import BONUS, CORRECTION, PLAIN

from tests.support.events import make_events


@pytest.fixture
def spec_events():
    return make_events([
        (["a", "b", "c"], 3, "d", BONUS),  # 4 tokens
        (["e", "f", "g"], 1, "h", CORRECTION),  # 2 tokens
        ([], 0, "i", PLAIN),  # 1 token (e.g. lookup found nothing)
        (["j", "k"], 0, "l", CORRECTION),  # 1 token
    ])


@pytest.fixture
def plain_events():
    return make_events([([], 0, t, PLAIN) for t in "abcdefgh"])


def test_acceptance_figure(spec_events):
    fig = acceptance_figure(spec_events)
    bars_acc, bars_rej, rate = fig.data
    assert (bars_acc.type, bars_rej.type, rate.type) == ("bar", "bar", "scatter")
    assert list(bars_acc.x) == [0, 1, 2, 3] and list(bars_acc.y) == [3, 1, 0, 0]
    assert list(bars_rej.y) == [0, 2, 0, 2]
    assert rate.yaxis == "y2" and fig.layout.barmode == "stack"
    assert list(rate.y) == pytest.approx([1.0, 4 / 6, 4 / 6, 4 / 8])
    assert bars_acc.marker.color == palette.ACCEPTED and bars_rej.marker.color == palette.REJECTED


def test_acceptance_rate_has_a_gap_before_anything_is_drafted():
    fig = acceptance_figure(make_events([([], 0, "a", PLAIN), (["b"], 1, "c", BONUS)]))
    assert list(fig.data[2].y) == [None, 1.0]


def test_throughput_figure(spec_events, plain_events):
    fig = throughput_figure(spec_events, plain_events)
    spec, plain = fig.data
    assert (spec.name, plain.name) == ("speculative", "plain")
    assert list(spec.y) == [0, 4, 6, 7, 8] and len(spec.x) == 5 and spec.x[0] == 0.0
    assert list(plain.y) == list(range(9))
    assert spec.line.color == palette.SPECULATIVE and plain.line.color == palette.PLAIN


def test_throughput_while_streaming(spec_events):
    fig = throughput_figure(spec_events, None)
    assert len(fig.data) == 2 and len(fig.data[0].y) == 5 and len(fig.data[1].y or ()) == 0


def test_tokens_per_pass_figure(spec_events):
    bars, predicted = tokens_per_pass_figure(spec_events).data
    assert list(bars.x) == [1, 2, 3, 4] and list(bars.y) == [2, 1, 0, 1]
    # alpha = 4 accepted / (4 + 2 rejections); the steps drafted 3, 3, 0 and 2 tokens
    from specdec.core.theory import expected_pass_counts

    assert list(predicted.y) == pytest.approx(expected_pass_counts(4 / 6, [3, 3, 0, 2]))
    assert sum(predicted.y) == pytest.approx(4)  # one expected pass per step


@pytest.mark.parametrize("build", [
    lambda: acceptance_figure([]),
    lambda: acceptance_figure(None),
    lambda: throughput_figure(None, None),
    lambda: throughput_figure([], []),
    lambda: tokens_per_pass_figure([]),
    lambda: position_figure(None),
    lambda: accepted_lengths_figure([]),
])
def test_empty_figures_have_titles_and_no_points(build):
    fig = build()
    assert fig.layout.title.text and fig.layout.height == HEIGHT
    assert all(len(trace.y or ()) == 0 for trace in fig.data)
    fig.to_json()  # serialisable for gr.Plot


@pytest.mark.parametrize("build", [acceptance_figure, lambda e: throughput_figure(e, e), tokens_per_pass_figure,
                                   position_figure, accepted_lengths_figure])
def test_figures_are_valid_plotly_although_built_without_validation(build, spec_events):
    import plotly.graph_objects as go

    fig = build(spec_events)
    checked = go.Figure(fig.to_plotly_json())  # the validating constructor raises on a misspelt property
    assert checked.to_plotly_json() == fig.to_plotly_json()
    assert fig.layout.yaxis.title.text and fig.layout.uirevision == "keep"


@pytest.fixture
def two_drafters(spec_events):
    """The fixture's steps drafted by the draft model, then by a head, then one lookup step."""
    from dataclasses import replace

    head = make_events([(["a", "b", "c"], 2, "d", CORRECTION), (["e", "f", "g"], 3, "h", BONUS), (["i"], 0, "j", CORRECTION)])
    steps = [replace(e, drafter="model" if e.n_drafted else "") for e in spec_events]
    steps += [replace(e, drafter=name) for e, name in zip(head, ["head", "head", "lookup"])]
    total = 0
    for i, e in enumerate(steps):  # one run: steps and totals in order
        total += len(e.emitted)
        steps[i] = replace(e, step=i, total_tokens=total)
    return steps


def test_position_figure_has_a_line_per_drafter_in_its_colour(two_drafters):
    model, head, lookup = position_figure(two_drafters).data
    assert (model.name, head.name, lookup.name) == ("draft model", "trained head", "prompt lookup")
    # model: drafted 3 (all kept), 3 (kept 1), 2 (none kept): position 1 tested 3 times, kept twice
    assert list(model.x) == [1, 2, 3] and list(model.y) == pytest.approx([2 / 3, 1 / 2, 1.0])
    assert [list(c) for c in model.customdata] == [[2, 3], [1, 2], [1, 1]]  # kept, tested: shown on hover
    assert list(head.y) == pytest.approx([1.0, 1.0, 1 / 2]) and list(lookup.y) == [0.0]
    assert [t.line.color for t in (model, head, lookup)] == [palette.DRAFTER_COLOURS[n] for n in ("model", "head", "lookup")]
    assert "tested" in model.hovertemplate and list(model.text) == ["3", "2", "1"]  # how many steps judged each position
    fig = position_figure(two_drafters)
    assert tuple(fig.layout.yaxis.range) == (0, 1.05) and fig.layout.showlegend  # the legend names the drafters


def test_accepted_lengths_figure_shares_per_drafter(two_drafters):
    model, head, lookup = accepted_lengths_figure(two_drafters).data
    assert list(model.x) == [0, 1, 2, 3] and list(model.y) == pytest.approx([1 / 3, 1 / 3, 0, 1 / 3])
    assert [list(c) for c in model.customdata] == [[1, 3], [1, 3], [0, 3], [1, 3]]
    assert list(head.y) == pytest.approx([0, 0, 1 / 2, 1 / 2]) and list(lookup.y) == [1.0, 0.0]  # kept 0 of 1
    assert model.marker.color == palette.DRAFTER_COLOURS["model"]


def test_a_drafter_without_a_colour_of_its_own_gets_a_spare_one():
    colours = palette.drafter_colours(["model", "eagle", "mtp"])
    assert colours["model"] == palette.DRAFTER_COLOURS["model"]
    assert colours["eagle"] != colours["mtp"] and {colours["eagle"], colours["mtp"]} <= set(palette.SPARE_DRAFTER_COLOURS)


@pytest.mark.parametrize("colour", [*palette.DRAFTER_COLOURS.values(), *palette.SPARE_DRAFTER_COLOURS])
def test_drafter_colours_read_as_lines_in_both_themes(colour):
    line = palette.parse_colour(colour)
    for page in ("#ffffff", "#0b0f19"):
        assert palette.contrast(line, palette.parse_colour(page)) >= 3, (colour, page)
