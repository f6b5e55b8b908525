"""The Gradio page: controls -> engine -> StepEvents -> render/charts. No engine logic lives here."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import gradio as gr

from specdec.compare import first_difference
from specdec.config import DEFAULT_PAIR, PRESETS, GenerationConfig
from specdec.engine import generate
from specdec.metrics import summarize
from specdec.models import load_pair

from . import charts, render

try:  # on a ZeroGPU Space, GPU work must run inside spaces.GPU
    import spaces

    gpu = spaces.GPU
except ImportError:

    def gpu(fn):
        return fn


ASSETS = Path(__file__).resolve().parent.parent / "assets"
EXAMPLES = json.loads((ASSETS / "examples.json").read_text())
DRAFTERS = [("draft model", "model"), ("prompt lookup", "lookup"), ("auto: lookup, else draft model", "auto")]
HTML_EVERY_S = 0.1  # redraw the token panes at most this often (every step on a CPU)
PLOT_EVERY_S = 0.3  # plots are heavier for the browser: redraw less often
PENDING = '<div class="tokens"></div>'


class StopFlag(threading.Event):
    """Per-session stop signal. gr.State deep-copies its initial value for each session; a lock
    cannot be copied, so a copy is simply a fresh flag."""

    def __deepcopy__(self, memo):
        return StopFlag()


def _int(value):
    """Sliders and number boxes send floats; keep non-integers as they are so validation names the field."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _badge(config: GenerationConfig, spec: list, plain: list, dtype_name: str) -> str:
    if not config.greedy:
        return '<div class="badge">sampled: each run draws its own random numbers, so their texts may differ (both follow the target distribution)</div>'
    diff = first_difference(spec, plain, dtype_name)  # what counts as a tie depends on the dtype
    if diff is None:
        return render.render_badge(identical=True)
    return render.render_badge(
        identical=False, index=diff.index, margin=diff.margin, is_tie=diff.is_tie,
        spec_text=None if diff.spec_token is None else diff.spec_text,  # None: that run ended first
        plain_text=None if diff.plain_token is None else diff.plain_text,
    )


@gpu
def run(prompt, pair_name, drafter, k, adaptive_k, temperature, top_p, top_k, max_new_tokens, seed,
        compare, show_rejected, stop: StopFlag, progress=gr.Progress()):
    """Stream the speculative run, then the plain run. Yields
    (status, spec pane, plain pane, stats, acceptance plot, throughput plot, tokens-per-pass plot, spec events, plain events)."""
    stop.clear()
    try:
        config = GenerationConfig(
            max_new_tokens=_int(max_new_tokens), k=_int(k), adaptive_k=bool(adaptive_k), temperature=temperature,
            top_k=_int(top_k), top_p=top_p, seed=_int(seed), drafter=drafter,
        ).validate()
        pair = load_pair(pair_name, progress=lambda f, msg: progress(f, desc=msg))
        spec_stream = generate(pair, prompt, config, stop=stop)  # validates the prompt before the first step
    except ValueError as err:
        gr.Warning(str(err))
        yield (f"Not started: {err}",) + (gr.skip(),) * 8
        return

    status = f"{pair.name} on {pair.device} ({pair.dtype_name}), from {pair.source}"
    spec, plain = [], []
    last_html = last_plot = 0.0

    def frame(force: bool = False):
        """One update of every output, or None when the throttle says to skip this step."""
        nonlocal last_html, last_plot
        now = time.monotonic()
        if not force and now - last_html < HTML_EVERY_S:
            return None
        last_html = now
        plots = (gr.skip(),) * 3
        if force or now - last_plot >= PLOT_EVERY_S:
            last_plot = now
            plots = (charts.acceptance_figure(spec), charts.throughput_figure(spec, plain),
                     charts.tokens_per_pass_figure(spec))
        done = force and plain and not stop.is_set()  # compare only two finished runs
        stats = render.render_stats(summarize(spec), summarize(plain) if plain else None,
                                    badge=_badge(config, spec, plain, pair.dtype_name) if done else None)
        return (status, render.render_tokens(spec, show_rejected), render.render_tokens(plain, False) if plain else PENDING,
                stats, *plots, spec, plain)

    for event in spec_stream:
        spec.append(event)
        if (update := frame()) is not None:
            yield update
    if compare and not stop.is_set():
        # The baseline: the same settings and target, nothing drafted.
        for event in generate(pair, prompt, replace(config, drafter="none"), stop=stop):
            plain.append(event)
            if (update := frame()) is not None:
                yield update
    if stop.is_set():
        status += " \u2014 stopped"
    yield frame(force=True)


def default_pair_name() -> str:
    """$SPECDEC_PAIR when it names a preset, else the project default."""
    name = os.environ.get("SPECDEC_PAIR", DEFAULT_PAIR)
    return name if name in PRESETS else DEFAULT_PAIR


def build_demo() -> gr.Blocks:
    default_pair = default_pair_name()
    with gr.Blocks(title="Speculative decoding, seen live") as demo:
        gr.Markdown(
            "# Speculative decoding, seen live\n"
            "A small draft model guesses the next K tokens; the large target model checks all of them in one "
            "forward pass and keeps the longest prefix it agrees with, plus one token of its own: "
            "the same text as the target alone, in fewer target passes."
        )
        gr.HTML(render.render_legend())
        stop = gr.State(StopFlag())
        spec_events, plain_events = gr.State([]), gr.State([])
        with gr.Row():
            with gr.Column(scale=3):
                prompt = gr.Textbox(label="Prompt", lines=6, elem_id="prompt", placeholder="Ask the model for some code...")
                with gr.Row():
                    go_btn = gr.Button("Generate", variant="primary", elem_id="generate")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
                gr.Examples(
                    examples=[[e["prompt"]] for e in EXAMPLES], inputs=[prompt],
                    example_labels=[f'{e["kind"]}: {e["id"]}' for e in EXAMPLES], label="Example prompts",
                )
            with gr.Column(scale=2):
                pair = gr.Dropdown(list(PRESETS), value=default_pair, label="Model pair",
                                   info=PRESETS[default_pair].description)
                drafter = gr.Radio(DRAFTERS, value="model", label="Drafter")
                k = gr.Slider(1, 16, value=5, step=1, label="K: draft tokens per step")
                adaptive = gr.Checkbox(False, label="Adaptive K (+2 after a full accept, -1 otherwise)")
                with gr.Row():
                    temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                    top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p")
                max_new = gr.Slider(8, 1024, value=128, step=8, label="Max new tokens", elem_id="max-new-tokens")
                with gr.Row():
                    top_k = gr.Number(0, precision=0, minimum=0, label="Top-k (0 = off)")
                    seed = gr.Number(0, precision=0, minimum=0, label="Seed")
                with gr.Row():
                    compare = gr.Checkbox(True, label="Compare with plain decoding")
                    show_rejected = gr.Checkbox(True, label="Show rejected draft tokens")
        status = gr.Markdown(elem_id="status")
        with gr.Row():
            with gr.Column():
                gr.HTML('<div class="pane-title spec">Speculative decoding</div>')
                spec_html = gr.HTML(PENDING, elem_id="spec-pane")
            with gr.Column():
                gr.HTML('<div class="pane-title">Plain decoding (same target)</div>')
                plain_html = gr.HTML(PENDING, elem_id="plain-pane")
        stats = gr.HTML(elem_id="stats")
        with gr.Row():
            acc_plot = gr.Plot(charts.acceptance_figure([]), show_label=False, elem_id="acceptance-plot")
            thr_plot = gr.Plot(charts.throughput_figure([], []), show_label=False, elem_id="throughput-plot")
            tpp_plot = gr.Plot(charts.tokens_per_pass_figure([]), show_label=False, elem_id="tokens-per-pass-plot")

        pair.change(lambda name: gr.update(info=PRESETS[name].description), pair, pair)
        go_btn.click(
            run,
            [prompt, pair, drafter, k, adaptive, temperature, top_p, top_k, max_new, seed, compare, show_rejected, stop],
            [status, spec_html, plain_html, stats, acc_plot, thr_plot, tpp_plot, spec_events, plain_events],
            concurrency_limit=1,  # one process-wide model pair: one generation at a time
        )
        # Stop only sets the flag; the engine checks it before each step. It must not wait behind Generate.
        stop_btn.click(lambda flag: flag.set(), stop, None, concurrency_limit=None)
        show_rejected.change(render.render_tokens, [spec_events, show_rejected], spec_html, concurrency_limit=None)
    return demo


def launch_kwargs() -> dict:
    """Gradio 6 takes the theme and the css at launch(), not in Blocks()."""
    return {"css_paths": [ASSETS / "style.css"], "theme": gr.themes.Soft()}
