"""The theory tab's figures: speedup vs K, the co-design map, what a pass costs. They read
RunMetrics, PassCosts and sweep points, and call specdec.core.theory for every predicted value."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from specdec.measure.passcost import PassCosts
from specdec.core.theory import best_k, expected_tokens_per_pass, iso_speedup_grid, speedup_curve

from . import palette
from .charts import titled_figure

KS = list(range(1, 17))
TEXTBOOK = "#9ca3af"
OTHER_LINES = ("#7c3aed", "#0891b2", "#b45309", "#be185d")  # other kernels' and engines' break-even lines and cost curves  # light grey: the textbook curve, a reference rather than a run
ISO_FIRST, ISO_LAST, ISO_STEP = 0.25, 4.0, 0.25  # the lines of equal speedup drawn


def draft_c(m) -> float | None:
    """The draft model's own c where it drafted (auto blends in free lookup steps), else the run's."""
    return m.draft_model_c if m.draft_model_c is not None else m.cost_ratio_c


def verify_cost_at(m, costs: PassCosts | None):
    """K -> verify cost: from the pass-cost measurement when there is one, else the run's own,
    the same for every K."""
    if costs is not None:
        return costs.verify_cost
    return lambda k: m.verify_cost


def k_curve_figure(m=None, costs: PassCosts | None = None, sweep=(), run_k=None, run_speedup=None) -> go.Figure:
    """Predicted speedup for K = 1..16 from the run's alpha and c (textbook: verify cost 1; and with
    the verify cost), the best K marked, measured points of a sweep and of the run itself."""
    fig = titled_figure("Speedup vs K", "K: draft tokens per step", "speedup over plain")
    if m is not None and m.drafted and draft_c(m) is not None:
        c = draft_c(m)
        textbook = speedup_curve(m.alpha, c, lambda k: 1.0, KS)
        with_verify = speedup_curve(m.alpha, c, verify_cost_at(m, costs), KS)
        fig.add_scatter(x=KS, y=textbook, name="textbook (verify = 1 step)", mode="lines",
                        line=dict(color=TEXTBOOK, dash="dash", width=2))
        fig.add_scatter(x=KS, y=with_verify, name="with measured verify cost", mode="lines",
                        line=dict(color=palette.SPECULATIVE, width=2))
        best = best_k(KS, with_verify)
        fig.add_scatter(x=[best], y=[with_verify[best - 1]], name=f"best K = {best}", mode="markers",
                        marker=dict(symbol="star", size=14, color=palette.SPECULATIVE))
    points = [p for p in sweep if p.speedup]
    if points:
        fig.add_scatter(x=[p.k for p in points], y=[p.speedup for p in points], name="measured (Sweep K)",
                        mode="markers+lines", line=dict(color=palette.ACCEPTED, width=1, dash="dot"),
                        marker=dict(size=9, color=palette.ACCEPTED))
    if run_k and run_speedup:
        fig.add_scatter(x=[run_k], y=[run_speedup], name="this run", mode="markers",
                        marker=dict(symbol="diamond", size=11, color=palette.BONUS))
    fig.add_hline(y=1.0, line=dict(color="rgba(128,128,128,0.6)", width=1))
    fig.update_layout(xaxis=dict(dtick=1, range=[0.5, 16.5]))
    return fig


def codesign_figure(k: int | None = None, verify_cost: float | None = None, points=(), break_even=None) -> go.Figure:
    """Iso-speedup contours over per-token acceptance (x) and c (y) for one K and verify cost,
    every drafter run so far as a labelled point, and `break_even` (name -> verify cost): one dashed
    break-even line per other kernel or engine, c = (E(alpha, K) - v) / K, where its drafts stop paying."""
    fig = titled_figure("Co-design map: acceptance vs draft cost", "per-token acceptance \u03b1", "c: draft pass / decode step")
    c_max = max([0.6] + [p.c * 1.15 for p in points if p.c is not None])
    if k and verify_cost:
        alphas = [i / 50 for i in range(50)]  # alpha = 1 is the limit K+1 tokens per pass; leave it out
        cs = [c_max * i / 40 for i in range(41)]
        fig.add_contour(
            x=alphas, y=cs, z=iso_speedup_grid(k, verify_cost, alphas, cs), showscale=False, name="predicted speedup",
            contours=dict(coloring="lines", showlabels=True, start=ISO_FIRST, end=ISO_LAST, size=ISO_STEP,
                          labelfont=dict(size=10)),
            line=dict(width=1), colorscale=[[0, "#9ca3af"], [1, palette.SPECULATIVE]],
            hovertemplate="\u03b1 %{x:.2f}, c %{y:.2f}: %{z:.2f}\u00d7<extra></extra>",
        )
        fig.add_contour(  # break-even, drawn bold: above it a drafter loses time
            x=alphas, y=cs, z=iso_speedup_grid(k, verify_cost, alphas, cs), showscale=False, name="break-even (1\u00d7)",
            contours=dict(coloring="lines", start=1.0, end=1.0, size=1.0), line=dict(width=3),
            colorscale=[[0, palette.REJECTED], [1, palette.REJECTED]], hoverinfo="skip",
        )
    for i, (name, v) in enumerate((break_even or {}).items() if k else ()):
        alphas = [j / 100 for j in range(100)]
        cs = [(expected_tokens_per_pass(a, k) - v) / k for a in alphas]
        fig.add_scatter(x=alphas, y=cs, mode="lines", name=f"{name}: break-even (check {v:.2f} steps)",
                        line=dict(color=OTHER_LINES[i % len(OTHER_LINES)], dash="dash", width=2),
                        hovertemplate=f"{name}: break-even at \u03b1 %{{x:.2f}}, c %{{y:.2f}}<extra></extra>")
    if points:
        fig.add_scatter(
            x=[p.alpha for p in points], y=[p.c for p in points], mode="markers+text", name="drafters run",
            text=[p.label for p in points], textfont=dict(size=10),
            textposition=["top left" if p.alpha > 0.75 else "top right" for p in points],  # labels stay inside the axes
            marker=dict(size=10, color=palette.BONUS),
            hovertext=[p.hover for p in points], hoverinfo="text",
        )
    fig.update_layout(xaxis=dict(range=[0, 1]), yaxis=dict(range=[0, c_max]), showlegend=bool(break_even),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def passcost_figure(costs: PassCosts | None = None, k: int | None = None, tables=None) -> go.Figure:
    """One target pass over n tokens (ms) on this machine, one draft pass beside it, K+1 marked;
    with `tables` (name -> PassCosts), one curve per target kernel (and llama.cpp)."""
    fig = titled_figure("What a pass costs here", "tokens in one target pass", "milliseconds")
    curves = dict(tables) if tables else ({"target pass": costs} if costs is not None else {})
    if not curves:
        return fig
    costs = costs or next(iter(curves.values()))
    for i, (name, table) in enumerate(curves.items()):
        steps = [t / table.decode_step_s for t in table.target_s]
        colour = OTHER_LINES[i % len(OTHER_LINES)] if tables else palette.SPECULATIVE
        fig.add_scatter(x=list(table.sizes), y=[1000 * t for t in table.target_s], name=name, mode="lines+markers",
                        line=dict(color=colour, width=2), customdata=steps,
                        hovertemplate=f"{name}, %{{x}} tokens: %{{y:.1f}} ms = %{{customdata:.2f}} decode steps<extra></extra>")
    if costs.draft_s is not None:
        fig.add_hline(y=1000 * costs.draft_s, line=dict(color=palette.Q_DRAFT, dash="dash", width=2),
                      annotation_text=f"one draft pass {1000 * costs.draft_s:.1f} ms", annotation_position="top left")
    if k:
        fig.add_vline(x=k + 1, line=dict(color=palette.BONUS, dash="dot", width=1),
                      annotation_text=f"K+1 = {k + 1}", annotation_position="top right")
    sizes = sorted({n for table in curves.values() for n in table.sizes})
    span = [math.log10(min(sizes) / 1.25), math.log10(max(sizes) * 1.25)]  # a log axis takes log10 bounds
    fig.update_layout(xaxis=dict(type="log", range=span, tickvals=sizes, ticktext=[str(n) for n in sizes]),
                      yaxis=dict(rangemode="tozero"), showlegend=bool(tables), legend=dict(orientation="h", y=-0.25))
    return fig
