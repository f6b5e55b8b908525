"""The Gradio page: layout (app.layout) wired to handlers (app.live). No engine logic lives here."""

from __future__ import annotations

import gradio as gr

from specdec.serving import gpu_budget
from specdec.core.config import GenerationConfig
from specdec.models.presets import PRESETS
from specdec.models.pair import pick_device
from specdec.serving.pairs import shared_store
from specdec.kernels.variants import default_variant

from . import advanced, engine_choice, export, present, render, replay, stepping, theory, theory_run
from .layout import ASSETS, build_layout
from .live import live_run, stop_session

GENERATION = "generation"  # the pairs are shared by every session: runs, steps and sweeps take turns


def default_pair_name() -> str:
    """The deployment's default pair ($SPECDEC_PAIR, else the first of $SPECDEC_PAIRS, else the project default)."""
    return shared_store().default


def max_new_tokens_cap() -> int:
    """The Max new tokens slider's end: 1024, or on ZeroGPU what fits one GPU call of the default
    pair at the default settings."""
    if not gpu_budget.on_zero_gpu():
        return 1024
    config = GenerationConfig(k=5)
    costs = gpu_budget.costs_for(gpu_budget.cost_key(shared_store().default, config))
    fit = gpu_budget.max_new_tokens_within(gpu_budget.call_limit(), config, True, costs)
    return max(8, min(1024, fit // 8 * 8))


def build_demo() -> gr.Blocks:
    store = shared_store()
    with gr.Blocks(title="Speculative decoding, seen live") as demo:
        page = build_layout(store.default, store.offer.names, max_new_tokens_cap(), store.offer.explain())

        run_inputs = page.settings() | {page.stop, page.theory_state, page.step_state}

        def on_generate(values: dict, request: gr.Request, progress=gr.Progress()):
            values[page.step_state].close()  # a held stepped run ends when another run starts
            yield from live_run(page, values, progress, session=request.session_hash if request else None)

        def on_step(values: dict, progress=gr.Progress()):
            return stepping.step(page, values, progress)

        def on_run_to_end(values: dict, progress=gr.Progress()):
            yield from stepping.run_to_end(page, values, progress)

        def on_sweep(values: dict, progress=gr.Progress()):
            yield from theory_run.sweep(page, values, progress)

        def on_measure(values: dict, progress=gr.Progress()):
            return theory_run.measure_passes(page, values, progress)

        def on_token_click(values: dict, evt: gr.EventData):
            return stepping.open_token(page, values, evt)

        page.pair.change(lambda name: gr.update(info=PRESETS[name].description if name in PRESETS else None), page.pair, page.pair)
        # Each pair starts on the draft variant measured fastest for it on this kind of machine.
        page.pair.change(lambda name: default_variant(name, pick_device()), page.pair, page.draft_variant)
        page.plain_int4.change(lambda on: gr.update(visible=bool(on)), page.plain_int4, page.lossy_lane, concurrency_limit=None)
        # preprocess=False: values arrive as sent, so read_config can name a wrong field (Gradio's own checks cannot).
        # One run at a time (concurrency_limit=1 shared by GENERATION): the pairs are shared by every session.
        run = page.generate.click(on_generate, run_inputs, page.run_outputs(), api_name="generate",
                                  concurrency_limit=1, concurrency_id=GENERATION, preprocess=False)
        stepped = page.step_button.click(on_step, run_inputs, page.run_outputs() + [page.step_panel], api_name="step",
                                         concurrency_limit=1, concurrency_id=GENERATION, preprocess=False)
        ended = page.run_to_end.click(on_run_to_end, run_inputs, page.run_outputs(), api_name="run_to_end",
                                      concurrency_limit=1, concurrency_id=GENERATION, preprocess=False)
        page.sweep_button.click(on_sweep, run_inputs, theory.outputs(page), api_name="sweep_k",
                                concurrency_limit=1, concurrency_id=GENERATION, preprocess=False)
        page.measure_button.click(on_measure, {page.pair, page.prompt, page.draft_variant, page.theory_state}, theory.outputs(page),
                                  api_name="measure_pass_costs", concurrency_limit=1, concurrency_id=GENERATION,
                                  preprocess=False)
        page.spec_html.click(on_token_click, {page.spec_events, page.step_state}, page.step_panel, concurrency_limit=None)
        shown = [run, stepped, ended, export.wire_load(page)]  # after each, a new run (or step) is on screen
        export.wire(page, shown)
        replay.wire(page, shown)
        present.wire(page, demo)
        engine_choice.wire(page)
        advanced.wire(page)
        # Stop only sets the flag; the run checks it after each step. It must not wait behind Generate.
        page.stop_button.click(lambda flag: flag.set(), page.stop, None, concurrency_limit=None)
        page.show_rejected.change(render.render_spans, [page.spec_events, page.show_rejected], page.spec_html,
                                  concurrency_limit=None)

        def on_unload(request: gr.Request):  # a closed tab ends its run before the next step
            stop_session(request.session_hash)

        demo.unload(on_unload)
    return demo


def launch_kwargs() -> dict:
    """Gradio 6 takes the theme and the css at launch(), not in Blocks()."""
    return {"css_paths": [ASSETS / "style.css"], "theme": gr.themes.Soft()}
