"""The page's layout: its sections in order, each adding its components to one Page (app/page.py)."""

from __future__ import annotations

import json

import gradio as gr

from specdec.models.presets import PRESETS

from . import advanced, charts, export, how_it_works, present, replay, step_panel, theory
from .page import ASSETS, PENDING, Page, StopFlag

EXAMPLES = json.loads((ASSETS / "examples.json").read_text())
# A token pane draws its spans itself (assets/tokens_pane.js): new spans are added, not the pane redrawn.
TOKENS_TEMPLATE = '<div class="tokens"></div>'
TOKENS_JS = (ASSETS / "tokens_pane.js").read_text()
INTRO = (
    "# Speculative decoding, seen live\n"
    "A small draft model guesses the next K tokens; the large target model checks all of them in one "
    "forward pass and keeps the longest prefix it agrees with, plus one token of its own: "
    "the same text as the target alone, in fewer target passes."
)


def build_layout(default_pair: str, pairs=None, max_new_tokens: int = 1024, pair_note: str = "") -> Page:
    """The whole page. Each section is a function that adds its components to `page`. `pairs`: the
    presets offered (all when None); `max_new_tokens`: the end of that slider; `pair_note`: why
    these pairs and this default (shown in Advanced)."""
    page = Page()
    gr.Markdown(INTRO, elem_id="intro")
    present.header(page)
    page.stop = gr.State(StopFlag())  # per session: Stop sets it, the engine checks it before each step
    page.spec_events, page.plain_events = gr.State([]), gr.State([])
    page.run_view = gr.State(None)  # the RunView on screen (live, finished or loaded): what replay and export read
    with gr.Tabs(elem_id="tabs"):
        with gr.Tab("Live", id="live", elem_id="live"):
            controls(page, default_pair, pairs or list(PRESETS), max_new_tokens, pair_note)
            panes(page)
            replay.section(page)
            export.section(page)
            theory.predictions_section(page)
            step_panel.section(page)
            plots(page)
        theory.tab(page)
        how_it_works.section(page)
    return page


def controls(page: Page, default_pair: str, pairs, max_new_tokens: int, pair_note: str = "") -> None:
    """The prompt and Generate beside the settings that change what the page shows; the rest folded
    into Advanced (app/advanced.py). Folded away as a whole in the lecture-hall view."""
    with gr.Column(elem_id="controls"):
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=360):
                page.prompt = gr.Textbox(label="Prompt", lines=3, max_lines=12, elem_id="prompt",
                                         placeholder="Ask the model for some code...")
                with gr.Row():
                    page.generate = gr.Button("Generate", variant="primary", elem_id="generate")
                    page.stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
                gr.Examples(
                    examples=[[e["prompt"]] for e in EXAMPLES], inputs=[page.prompt], elem_id="examples",
                    example_labels=[f'{e["kind"]}: {e["id"]}' for e in EXAMPLES], label="Example prompts",
                )
            with gr.Column(scale=1, min_width=360, elem_id="settings"):
                page.pair = gr.Dropdown(list(pairs), value=default_pair, label="Model pair",
                                        info=PRESETS[default_pair].description, elem_id="pair")
                with gr.Row():
                    page.k = gr.Slider(1, 16, value=5, step=1, label="K: draft tokens per step", elem_id="k")
                    page.temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)",
                                                 elem_id="temperature")
                with gr.Row(equal_height=True):
                    page.max_new = gr.Slider(8, max_new_tokens, value=min(128, max_new_tokens), step=8,
                                             label="Max new tokens", elem_id="max-new-tokens")
                    page.compare = gr.Checkbox(True, label="Compare with plain decoding", elem_id="compare")
        advanced.section(page, default_pair, pair_note)


def panes(page: Page) -> None:
    """Status line, the two token panes side by side, the stats row."""
    page.status = gr.Markdown(elem_id="status")
    with gr.Row(elem_id="panes"):
        with gr.Column(elem_classes="pane-column"):
            gr.HTML('<div class="pane-title spec">Speculative decoding</div>', elem_classes="pane-head")
            page.spec_html = gr.HTML(PENDING, html_template=TOKENS_TEMPLATE, js_on_load=TOKENS_JS, elem_id="spec-pane")
        with gr.Column(elem_classes="pane-column"):
            gr.HTML('<div class="pane-title">Plain decoding (same target)</div>', elem_classes="pane-head")
            page.plain_html = gr.HTML(PENDING, html_template=TOKENS_TEMPLATE, js_on_load=TOKENS_JS, elem_id="plain-pane")
    page.stats = gr.HTML(elem_id="stats")
    # The lossy alternative: faster, and different text (shown only when its checkbox is on).
    with gr.Column(visible=False) as page.lossy_lane:
        gr.HTML('<div class="pane-title">Plain decoding, int4-quantized target (lossy: not the target\'s text)</div>')
        page.lossy_note = gr.HTML(elem_id="lossy-note")
        page.lossy_html = gr.HTML(TOKENS_TEMPLATE, elem_id="lossy-pane")  # drawn whole (render_tokens), once at the end


def plots(page: Page) -> None:
    with gr.Row():
        page.acc_plot = gr.Plot(charts.acceptance_figure([]), show_label=False, elem_id="acceptance-plot")
        page.thr_plot = gr.Plot(charts.throughput_figure([], []), show_label=False, elem_id="throughput-plot")
        page.tpp_plot = gr.Plot(charts.tokens_per_pass_figure([]), show_label=False, elem_id="tokens-per-pass-plot")
    page.plots = (page.acc_plot, page.thr_plot, page.tpp_plot)
