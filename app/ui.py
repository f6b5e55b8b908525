"""The Gradio page: layout (app.layout) wired to handlers (app.live). No engine logic lives here."""

from __future__ import annotations

import os

import gradio as gr

from specdec.config import DEFAULT_PAIR, PRESETS

from . import render
from .layout import ASSETS, build_layout
from .live import live_run_on_gpu


def default_pair_name() -> str:
    """$SPECDEC_PAIR when it names a preset, else the project default."""
    name = os.environ.get("SPECDEC_PAIR", DEFAULT_PAIR)
    return name if name in PRESETS else DEFAULT_PAIR


def build_demo() -> gr.Blocks:
    with gr.Blocks(title="Speculative decoding, seen live") as demo:
        page = build_layout(default_pair_name())

        def on_generate(values: dict, progress=gr.Progress()):
            yield from live_run_on_gpu(page, values, progress)

        page.pair.change(lambda name: gr.update(info=PRESETS[name].description), page.pair, page.pair)
        page.generate.click(
            on_generate, page.settings() | {page.stop}, page.run_outputs(),
            concurrency_limit=1,  # one process-wide model pair: one generation at a time
        )
        # Stop only sets the flag; the engine checks it before each step. It must not wait behind Generate.
        page.stop_button.click(lambda flag: flag.set(), page.stop, None, concurrency_limit=None)
        page.show_rejected.change(render.render_tokens, [page.spec_events, page.show_rejected], page.spec_html,
                                  concurrency_limit=None)
    return demo


def launch_kwargs() -> dict:
    """Gradio 6 takes the theme and the css at launch(), not in Blocks()."""
    return {"css_paths": [ASSETS / "style.css"], "theme": gr.themes.Soft()}
