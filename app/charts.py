"""StepEvents -> plotly figures for gr.Plot. They are redrawn while a run streams, so they stay small:
fixed height, thin margins, no template lookups, transparent background (readable in light and dark mode).

They are also cheap to build: each figure's layout is given whole, and plotly's property
validation is skipped (`_validate=False`). Validating and merging nested layout keys cost 15 to 45 ms
of Python per figure on a laptop CPU, in the process whose engine the page is timing; built this
way a figure costs about 1 ms. tests/test_charts.py validates every figure, so a misspelt property
still fails a test."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import plotly.graph_objects as go

from specdec.core.events import StepEvent
from specdec.measure.metrics import estimate_alpha
from specdec.core.theory import expected_pass_counts
from specdec.measure.positions import by_drafter

from . import palette
from .advanced import SHORT_DRAFTERS

HEIGHT = 260
_AXIS = dict(gridcolor="rgba(128,128,128,0.25)", zerolinecolor="rgba(128,128,128,0.4)")


def titled_figure(title: str, x_title: str, y_title: str, **layout) -> go.Figure:
    """An empty figure in the project's style; `layout` adds or replaces top-level layout keys."""
    base = dict(
        title=dict(text=title, x=0.01, y=0.98, yanchor="top", font=dict(size=14)),
        height=HEIGHT,
        margin=dict(l=48, r=48, t=56, b=40),
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        font=dict(color="#8a8f98", size=12),  # mid grey reads on both light and dark pages
        legend=dict(orientation="h", traceorder="normal", x=0, xanchor="left", y=1.0, yanchor="bottom", font=dict(size=11)),  # under the title
        uirevision="keep",  # keep the user's zoom while the figure is replaced step by step
        xaxis=dict(title=dict(text=x_title), **_AXIS),
        yaxis=dict(title=dict(text=y_title), **_AXIS),
    )
    return go.Figure({"layout": base | layout}, _validate=False)


def acceptance_figure(events: Sequence[StepEvent] | None) -> go.Figure:
    """Per step: accepted and rejected drafts as stacked bars; the running acceptance rate on the right axis."""
    events = list(events or [])
    steps = [e.step for e in events]
    accepted = [e.accepted for e in events]
    rejected = [e.n_rejected for e in events]  # named or only counted
    running, acc_sum, drafted_sum = [], 0, 0
    for e in events:
        acc_sum += e.accepted
        drafted_sum += e.n_drafted
        running.append(acc_sum / drafted_sum if drafted_sum else None)  # None: a gap until something is drafted

    fig = titled_figure(
        "Draft tokens per step", "step (target pass)", "draft tokens", barmode="stack", bargap=0.15,
        yaxis2=dict(title=dict(text="acceptance rate"), overlaying="y", side="right", range=[0, 1.05],
                    tickformat=".0%", dtick=0.25, showgrid=False),
    )
    fig.add_bar(x=steps, y=accepted, name="accepted", marker_color=palette.ACCEPTED)
    fig.add_bar(x=steps, y=rejected, name="rejected", marker_color=palette.REJECTED)
    fig.add_scatter(
        x=steps, y=running, name="rate so far", mode="lines", yaxis="y2",
        line=dict(color=palette.SPECULATIVE, width=2),
    )
    return fig


def _cumulative(events: Sequence[StepEvent] | None) -> tuple[list[float], list[int]]:
    """(seconds, tokens) from the origin: the slope of the line is tokens per second."""
    events = list(events or [])
    if not events:
        return [], []
    return [0.0] + [e.elapsed_s for e in events], [0] + [e.total_tokens for e in events]


def throughput_figure(spec_events: Sequence[StepEvent] | None, plain_events: Sequence[StepEvent] | None) -> go.Figure:
    """Cumulative new tokens over elapsed seconds for both runs; either may be empty while streaming."""
    fig = titled_figure("Tokens over time (slope = tokens/s)", "seconds", "new tokens")
    for name, events, colour in [
        ("speculative", spec_events, palette.SPECULATIVE),
        ("plain", plain_events, palette.PLAIN),
    ]:
        x, y = _cumulative(events)
        fig.add_scatter(x=x, y=y, name=name, mode="lines", line=dict(color=colour, width=2))
    return fig


def tokens_per_pass_figure(events: Sequence[StepEvent] | None) -> go.Figure:
    """How many tokens each target pass produced (plain decoding would be a single bar at 1), beside
    the counts that independent acceptance at the run's alpha predicts for the same steps."""
    events = list(events or [])
    counts = Counter(len(e.emitted) for e in events)
    drafted = [e.n_drafted for e in events]
    expected = expected_pass_counts(estimate_alpha(events), drafted) if any(drafted) else []
    x = list(range(1, max(max(counts, default=0), len(expected)) + 1)) if counts else []
    fig = titled_figure("Tokens per target pass", "tokens emitted in one pass", "passes", bargap=0.15, showlegend=bool(expected))
    fig.layout.xaxis.dtick = 1
    fig.add_bar(x=x, y=[counts.get(n, 0) for n in x], name="measured", marker_color=palette.SPECULATIVE)
    if expected:
        fig.add_scatter(x=x, y=[expected[n - 1] if n <= len(expected) else 0.0 for n in x], name="predicted from \u03b1",
                        mode="markers+lines", line=dict(color="#9ca3af", dash="dot", width=1),
                        marker=dict(symbol="diamond", size=9, color="#9ca3af"))
    return fig


# --- per drafter: acceptance by draft position, accepted lengths (specdec/measure/positions.py) ---

POSITIONS_CAPTION = (
    "**Acceptance by draft position**: of the steps where a drafter's k-th token was judged (it drafted "
    "k tokens and the target kept the first k - 1), the share where the target kept it too; the number by "
    "each point is how many steps judged that position (hover for the kept count). "
    "**Accepted drafts per step**: for each drafter, the share of its drafting steps that kept 0, 1, 2 ... "
    "of its drafts (steps with nothing drafted are left out of both)."
)


def _drafter_label(name: str) -> str:
    return SHORT_DRAFTERS.get(name, name)


def position_figure(events: Sequence[StepEvent] | None) -> go.Figure:
    """One line per drafter: accepted / tested at draft positions 1..K, the count tested beside each point."""
    figures = by_drafter(events or [])
    colours = palette.drafter_colours(figures)
    fig = titled_figure("Acceptance by draft position", "draft position k", "accepted / tested", showlegend=True,  # even for one drafter: its name
                        yaxis=dict(title=dict(text="accepted / tested"), range=[0, 1.05], tickformat=".0%", dtick=0.25, **_AXIS))
    fig.layout.xaxis.dtick = 1
    for name, f in figures.items():
        fig.add_scatter(
            x=list(range(1, len(f.tested) + 1)), y=list(f.rates), name=_drafter_label(name), mode="lines+markers+text",
            line=dict(color=colours[name], width=2), marker=dict(size=8, color=colours[name]),
            text=[str(t) for t in f.tested], textposition="top center", textfont=dict(size=10, color=colours[name]),
            cliponaxis=False,  # a point at 0% or 100% drawn whole
            customdata=[[a, t] for a, t in zip(f.accepted, f.tested)],
            hovertemplate="position %{x}: %{customdata[0]} kept of %{customdata[1]} tested (%{y:.0%})",
        )
    return fig


def accepted_lengths_figure(events: Sequence[StepEvent] | None) -> go.Figure:
    """Grouped bars per drafter: the share of its drafting steps that kept n drafts, the count on hover."""
    figures = by_drafter(events or [])
    colours = palette.drafter_colours(figures)
    fig = titled_figure("Accepted drafts per step", "drafts accepted in one step", "share of the drafter's steps",
                        barmode="group", bargap=0.15, showlegend=True,
                        yaxis=dict(title=dict(text="share of the drafter's steps"), rangemode="tozero", tickformat=".0%", **_AXIS))
    fig.layout.xaxis.dtick = 1
    fig.layout.xaxis.zeroline = False  # it would run through the bar at 0
    for name, f in figures.items():
        fig.add_bar(
            x=list(range(len(f.lengths))), y=list(f.length_shares), name=_drafter_label(name),
            marker_color=colours[name], customdata=[[n, f.steps] for n in f.lengths],
            hovertemplate="%{x} accepted: %{customdata[0]} of %{customdata[1]} steps (%{y:.0%})",
        )
    return fig
