"""app.charts: expected traces, points and colours; empty inputs give titled, empty figures."""

from __future__ import annotations

import pytest

from app import palette
from app.charts import HEIGHT, acceptance_figure, throughput_figure, tokens_per_pass_figure
from specdec.core.events import BONUS, CORRECTION, PLAIN

from test_render import make_events  # tests/ has no __init__.py: pytest puts it on sys.path


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
])
def test_empty_figures_have_titles_and_no_points(build):
    fig = build()
    assert fig.layout.title.text and fig.layout.height == HEIGHT
    assert all(len(trace.y or ()) == 0 for trace in fig.data)
    fig.to_json()  # serialisable for gr.Plot


@pytest.mark.parametrize("build", [acceptance_figure, lambda e: throughput_figure(e, e), tokens_per_pass_figure])
def test_figures_are_valid_plotly_although_built_without_validation(build, spec_events):
    import plotly.graph_objects as go

    fig = build(spec_events)
    checked = go.Figure(fig.to_plotly_json())  # the validating constructor raises on a misspelt property
    assert checked.to_plotly_json() == fig.to_plotly_json()
    assert fig.layout.yaxis.title.text and fig.layout.uirevision == "keep"
