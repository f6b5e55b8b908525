"""The page, whole: `build_page` lays out the sections of `Page` (app/components.py, which declares
every component a handler reads or writes) in the same order. Reading this file top to bottom is
reading the page top to bottom; app/ui.py wires its events to the handlers.

Handlers take their inputs as a dict keyed by these components and return a dict of updates, so a
feature adds a control or an output without reordering anyone's tuples, and a frame sends only
what changed. Long texts (help, captions) live with the module that explains them.
"""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from specdec.core.config import RUNNERS, GenerationConfig
from specdec.kernels import device_offer
from specdec.kernels.faithfulness_record import faithfulness_line
from specdec.models.pair import pick_device
from specdec.models.presets import PRESETS
from specdec.record.replay import SPEEDS
from specdec.serving import gpu_budget

from . import advanced, charts, engine_choice, how_it_works, render, step_panel, theory, theory_charts
from .components import Page, StopFlag
from .replay import ReplayControl

ASSETS = Path(__file__).resolve().parent.parent / "assets"
EXAMPLES = json.loads((ASSETS / "examples.json").read_text())
PENDING = ""  # a token pane with no spans yet
# A token pane draws its spans itself (assets/tokens_pane.js): new spans are added, not the pane redrawn.
TOKENS_TEMPLATE = '<div class="tokens"></div>'
TOKENS_JS = (ASSETS / "tokens_pane.js").read_text()
INTRO = (
    "# Speculative decoding, seen live\n"
    "A small draft model guesses the next K tokens; the large target model checks all of them in one "
    "forward pass and keeps the longest prefix it agrees with, plus one token of its own: "
    "the same text as the target alone, in fewer target passes."
)


def build_page(default_pair: str, pairs=None, max_new_tokens: int = 1024, pair_note: str = "") -> Page:
    """The whole page, inside a gr.Blocks. `pairs`: the presets offered (all when None);
    `max_new_tokens`: the end of that slider; `pair_note`: why these pairs and this default (shown
    in Advanced)."""
    page = Page()
    gr.Markdown(INTRO, elem_id="intro")
    with gr.Row(elem_id="present-bar", equal_height=True):  # what each colour and line means, and two switches
        gr.HTML(render.render_legend(), elem_id="legend")
        page.lecture_view = gr.Checkbox(False, label="Lecture-hall view", elem_id="lecture-view", scale=0, min_width=220)
        page.theme = gr.Checkbox(False, label="Dark theme", elem_id="theme", scale=0, min_width=160)
    page.stop = gr.State(StopFlag())
    page.spec_events, page.plain_events = gr.State([]), gr.State([])
    page.run_view = gr.State(None)
    with gr.Tabs(elem_id="tabs"):
        with gr.Tab("Live", id="live", elem_id="live"):
            _controls(page, default_pair, pairs or list(PRESETS), max_new_tokens, pair_note)
            _panes(page)
            _replay_and_export(page)
            page.predictions = gr.HTML(theory.WAITING, elem_id="predictions")
            _step_bar(page)
            _plots(page)
        _theory_tab(page)
        _how_it_works_tab()
    missing = [name for name in Page.__annotations__ if name not in vars(page)]
    undeclared = [name for name in vars(page) if name not in Page.__annotations__]
    if missing or undeclared:
        raise TypeError(f"Page and build_page disagree: not built {missing}, not declared {undeclared}")
    return page


def _controls(page: Page, default_pair: str, pairs, max_new_tokens: int, pair_note: str) -> None:
    """The prompt and Generate beside the settings that change what the page shows; the rest folded
    into Advanced. Folded away as a whole in the lecture-hall view."""
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
                    page.k = gr.Slider(1, 16, value=GenerationConfig().k, step=1, label="K: draft tokens per step", elem_id="k")
                    page.temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)",
                                                 elem_id="temperature")
                with gr.Row(equal_height=True):
                    page.max_new = gr.Slider(8, max_new_tokens, value=min(128, max_new_tokens), step=8,
                                             label="Max new tokens", elem_id="max-new-tokens")
                    with gr.Column(min_width=160):  # the defaults' one line under Compare, beside the slider: no height of its own
                        page.compare = gr.Checkbox(True, label="Compare with plain decoding", elem_id="compare")
                        page.defaults_note = gr.HTML(advanced.defaults_line(default_pair, pick_device()), elem_id="defaults-line")
        _advanced(page, default_pair, pair_note)


def _advanced(page: Page, default_pair: str, pair_note: str) -> None:
    """One closed accordion, labelled with every value inside it. Its dropdowns list what runs
    honestly on this device, and say why the rest does not."""
    device = pick_device()
    defaults = advanced.defaults(default_pair, device)
    variants, kernels = device_offer.draft_variants(device), device_offer.target_kernels(device)
    with gr.Accordion(advanced.summary(defaults), open=False, elem_id="advanced") as page.advanced:
        if pair_note:
            gr.Markdown(f"Model pairs here. {pair_note}", elem_id="pair-offer")
        drafters, drafter_info = advanced.drafter_choices(default_pair)
        page.drafter = gr.Radio(drafters, value=defaults.drafter, label="Drafter", elem_id="drafter", info=drafter_info)
        with gr.Row():
            page.draft_variant = gr.Dropdown(list(variants.names), value=defaults.draft_variant, label="Draft variant",
                                             elem_id="draft-variant", info=advanced.DRAFT_VARIANT_HELP + variants.explain(device.type))
            page.target_kernel = gr.Dropdown(
                list(kernels.names), value=defaults.target_kernel, label="Target kernel", elem_id="target-kernel",
                info=advanced.TARGET_KERNEL_HELP + kernels.explain(device.type)
                     + " " + faithfulness_line(default_pair, (*kernels.names, "llamacpp_plain")),
            )
        page.runner = gr.Radio(list(RUNNERS), value=defaults.runner, label="Runner", elem_id="runner", info=advanced.RUNNER_HELP)
        with gr.Row():
            page.adaptive = gr.Checkbox(defaults.adaptive, label="Adaptive K (+2 after a full accept, -1 otherwise)")
            page.cost_k = gr.Checkbox(defaults.cost_k, label="K from this machine's pass costs (0 where drafting would not pay)",
                                      elem_id="k-policy-cost")
        with gr.Row():
            page.top_p = gr.Slider(0.05, 1, value=defaults.top_p, step=0.05, label="Top-p")
            page.top_k = gr.Number(defaults.top_k, precision=0, minimum=0, label="Top-k (0 = off)")
            page.seed = gr.Number(defaults.seed, precision=0, minimum=0, label="Seed", elem_id="seed")
        with gr.Group(elem_id="engine-settings"):
            page.engine = gr.Radio(engine_choice.CHOICES, value=defaults.engine, label="Engine", elem_id="engine")
            with gr.Row(visible=False, elem_id="engine-urls") as page.engine_urls:
                page.spec_url = gr.Textbox(label="Speculative server (base URL)", placeholder="http://127.0.0.1:8080",
                                           elem_id="spec-url")
                page.plain_url = gr.Textbox(label="Plain server: same target, no draft (base URL)",
                                            placeholder="http://127.0.0.1:8081", elem_id="plain-url")
            page.start_llamacpp = gr.Button("Start llama.cpp on the embedded pair (plain and speculative servers)",
                                            visible=False, size="sm", elem_id="start-llamacpp")
            page.engine_note = gr.Markdown(engine_choice.NOTE_OURS, elem_id="engine-note")
        with gr.Row():
            lossy_off = device_offer.lossy_lane(device)
            page.plain_int4 = gr.Checkbox(defaults.lossy, label="Plain decoding, int4 target (lossy)", elem_id="plain-int4",
                                          interactive=lossy_off is None, info=f"not offered on {device.type}: {lossy_off}" if lossy_off else None)
            page.show_rejected = gr.Checkbox(defaults.show_rejected, label="Show rejected draft tokens", elem_id="show-rejected")


def _panes(page: Page) -> None:
    """Status line, the two token panes side by side, the stats row, and the lossy lane (hidden)."""
    # One line from the start: a run's line then takes its place without moving the panes.
    page.status = gr.HTML(render.render_status("No run yet: Generate starts one, and this line names what it runs on."),
                          elem_id="status")
    with gr.Row(elem_id="panes"):
        with gr.Column(elem_classes="pane-column"):
            gr.HTML('<div class="pane-title spec">Speculative decoding</div>', elem_classes="pane-head")
            # A click on a token opens its step in the step panel (step_panel.TOKEN_CLICK_JS).
            page.spec_html = gr.HTML(PENDING, html_template=TOKENS_TEMPLATE, js_on_load=TOKENS_JS + step_panel.TOKEN_CLICK_JS,
                                     elem_id="spec-pane")
        with gr.Column(elem_classes="pane-column"):
            gr.HTML('<div class="pane-title">Plain decoding (same target)</div>', elem_classes="pane-head")
            page.plain_html = gr.HTML(PENDING, html_template=TOKENS_TEMPLATE, js_on_load=TOKENS_JS, elem_id="plain-pane")
    page.stats = gr.HTML(elem_id="stats")
    # The lossy alternative: faster, and different text.
    with gr.Column(visible=False) as page.lossy_lane:
        gr.HTML('<div class="pane-title">Plain decoding, int4-quantized target (lossy: not the target\'s text)</div>')
        page.lossy_note = gr.HTML(elem_id="lossy-note")
        page.lossy_html = gr.HTML(TOKENS_TEMPLATE, elem_id="lossy-pane")  # drawn whole (render_tokens), once at the end


def _replay_and_export(page: Page) -> None:
    """The replay bar (Replay, Pause, speed, the step slider), then export and load."""
    page.replay_control = gr.State(ReplayControl())
    with gr.Row(elem_id="replay-bar"):
        page.replay = gr.Button("\u25b6 Replay", elem_id="replay", min_width=130, scale=0)
        page.replay_pause = gr.Button("Pause", elem_id="replay-pause", min_width=110, scale=0)
        page.replay_speed = gr.Radio([(f"{s:g}x", s) for s in SPEEDS], value=1.0, label="Replay speed (of real time)",
                                     elem_id="replay-speed", scale=0, min_width=380)
        page.replay_step = gr.Slider(0, 1, value=0, step=1, label="Step of the speculative run (drag to scrub)",
                                     elem_id="replay-step", scale=2, min_width=260)
    with gr.Row(elem_id="export-bar"):
        page.export_json = gr.DownloadButton("Export JSON", elem_id="export-json", interactive=False, size="sm")
        page.export_csv = gr.DownloadButton("Export CSV", elem_id="export-csv", interactive=False, size="sm")
        page.load_run = gr.UploadButton("Load a run (JSON)", elem_id="load-run", file_types=[".json"], size="sm")


def _step_bar(page: Page) -> None:
    """Step and Run to end, and the panel that explains a step. On ZeroGPU each GPU call runs in a
    worker, so nothing holds a run between clicks: both buttons are off there."""
    page.step_state = gr.State(step_panel.StepSession(), delete_callback=lambda session: session.close())
    held_here = not gpu_budget.on_zero_gpu()
    with gr.Row():
        page.step_button = gr.Button("Step", elem_id="step", size="sm", interactive=held_here)
        page.run_to_end = gr.Button("Run to end", elem_id="run-to-end", size="sm", interactive=held_here)
    page.step_panel = gr.HTML(step_panel.EMPTY if held_here else step_panel.ZERO_GPU, elem_id="step-panel")


def _plots(page: Page) -> None:
    with gr.Row():
        page.acc_plot = gr.Plot(charts.acceptance_figure([]), show_label=False, elem_id="acceptance-plot")
        page.thr_plot = gr.Plot(charts.throughput_figure([], []), show_label=False, elem_id="throughput-plot")
        page.tpp_plot = gr.Plot(charts.tokens_per_pass_figure([]), show_label=False, elem_id="tokens-per-pass-plot")
    with gr.Row():
        page.position_plot = gr.Plot(charts.position_figure([]), show_label=False, elem_id="position-plot")
        page.lengths_plot = gr.Plot(charts.accepted_lengths_figure([]), show_label=False, elem_id="lengths-plot")
    gr.Markdown(charts.POSITIONS_CAPTION, elem_id="positions-caption")


def _theory_tab(page: Page) -> None:
    """The Theory tab: speedup vs K, the co-design map, Sweep K and Measure pass costs, what a pass costs."""
    with gr.Tab("Theory", id="theory", elem_id="theory-tab"):
        # Inside the tab: a State placed directly in gr.Tabs is drawn as a second copy of the selected tab's button.
        page.theory_state = gr.State(theory.TheorySession())
        gr.Markdown(theory.INTRO)
        with gr.Row():
            with gr.Column():
                page.k_curve = gr.Plot(theory_charts.k_curve_figure(), show_label=False, elem_id="k-curve-plot")
                page.k_caption = gr.Markdown(theory.k_caption(theory.TheorySession()), elem_id="k-caption")
            with gr.Column():
                page.codesign = gr.Plot(theory_charts.codesign_figure(), show_label=False, elem_id="codesign-plot")
                page.codesign_caption = gr.Markdown(theory.codesign_caption(theory.TheorySession()), elem_id="codesign-caption")
        here = not gpu_budget.on_zero_gpu()  # both run in this process; on ZeroGPU GPU work runs in a worker per call
        with gr.Row():
            page.sweep_button = gr.Button("Sweep K: run K = 1, 2, 3, 4, 6, 8 on the prompt", elem_id="sweep", interactive=here)
            page.measure_button = gr.Button("Measure pass costs on this machine", elem_id="measure-passes", interactive=here)
        page.theory_status = gr.Markdown("" if here else "Sweep K and Measure pass costs are off on ZeroGPU.",
                                         elem_id="theory-status")
        with gr.Row():
            with gr.Column():
                page.passcost_plot = gr.Plot(theory_charts.passcost_figure(), show_label=False, elem_id="passcost-plot")
            with gr.Column():
                page.passcost_caption = gr.Markdown(theory.passcost_caption(None, None), elem_id="passcost-caption")


def _how_it_works_tab() -> None:
    """One step as a diagram, the formulas behind the predictions, and why the output is exactly the target's."""
    with gr.Tab("How it works", id="how-it-works", elem_id="how-it-works"):
        gr.HTML(f'<figure class="how-diagram">{how_it_works.DIAGRAM}</figure>', elem_id="how-diagram")
        gr.Markdown(how_it_works.STEP, elem_classes="how-text")
        gr.HTML(f'<figure class="how-diagram">{how_it_works.HEAD_DIAGRAM}</figure>', elem_id="head-diagram")
        gr.Markdown(how_it_works.HEAD, elem_classes="how-text")
        gr.Plot(how_it_works.head_data_figure(), show_label=False, elem_id="head-data-plot")
        gr.Markdown(how_it_works.HEAD_DATA_TEXT, elem_classes="how-text")
        gr.Markdown(how_it_works.FORMULAS, elem_classes="how-text",
                    latex_delimiters=[{"left": "$$", "right": "$$", "display": True}])
        gr.Markdown(how_it_works.EXACT, elem_classes="how-text")
