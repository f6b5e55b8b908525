"""The demo: the page (app/page.py) and every event wired to its handler, here and nowhere else.

The handlers: a live run (app/live.py), Step, Run to end and a click on a token (app/stepping.py),
Sweep K and Measure pass costs (app/theory_run.py), export and load (app/export.py), replay
(app/replay.py), the Engine choice (app/engine_choice.py) and the Advanced label (app/advanced.py).
Those that run a model (Generate, Step, Run to end, Sweep K) enter through one set of request
checks (app/request.py). No engine logic lives here.

Runs take their inputs as one dict (preprocess=False: values arrive as sent, so app/settings.py
can name a wrong field, which Gradio's own checks cannot) and share one concurrency group: the
pairs are shared by every session, so runs, steps and sweeps take turns.
"""

from __future__ import annotations

import gradio as gr

from specdec.core.config import GenerationConfig
from specdec.models.pair import pick_device
from specdec.models.presets import PRESETS
from specdec.serving import gpu_budget
from specdec.serving.pairs import shared_store

from . import advanced, engine_choice, export, render, replay, stepping, theory_run
from .live import live_run, stop_session
from .components import Page
from .page import ASSETS, build_page

GENERATION = "generation"  # the one concurrency group of everything that runs a model

# The lecture-hall view and the dark theme set a class on <body> in the browser ("lecture", and
# Gradio's own "dark"), so they cost the server nothing and cannot disturb a run. `?lecture=1` in
# the address opens the page in the lecture-hall view and Gradio's `?__theme=dark` in the dark
# theme; the switches follow.
TOGGLE_JS = "(on) => {{ document.body.classList.toggle('{cls}', !!on); return on; }}"  # returns its input: the box keeps its value
INIT_JS = """() => {
  const lecture = new URLSearchParams(window.location.search).get('lecture') === '1';
  document.body.classList.toggle('lecture', lecture);
  return [lecture, document.body.classList.contains('dark')];
}"""


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
        page = build_page(store.default, store.offer.names, max_new_tokens_cap(), store.offer.explain())
        shown = _wire_runs(page)
        _wire_run_on_screen(page, shown)
        _wire_settings(page)
        _wire_presenting(page, demo)
    return demo


def _wire_runs(page: Page) -> list:
    """Generate, Step, Run to end, Sweep K, Measure pass costs, Stop, a click on a token, and Load;
    returns the events after which a new run is on screen."""
    run_inputs = page.settings() | {page.stop, page.theory_state, page.step_state}
    turns = dict(concurrency_limit=1, concurrency_id=GENERATION, preprocess=False)

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

    def on_load(values: dict):
        return export.load(page, values)

    run = page.generate.click(on_generate, run_inputs, page.run_outputs(), api_name="generate", **turns)
    stepped = page.step_button.click(on_step, run_inputs, page.run_outputs() + [page.step_panel], api_name="step", **turns)
    ended = page.run_to_end.click(on_run_to_end, run_inputs, page.run_outputs(), api_name="run_to_end", **turns)
    page.sweep_button.click(on_sweep, run_inputs, page.theory_outputs(), api_name="sweep_k", **turns)
    page.measure_button.click(on_measure, {page.pair, page.prompt, page.draft_variant, page.theory_state},
                              page.theory_outputs(), api_name="measure_pass_costs", **turns)
    # Stop only sets the flag; the run checks it after each step. It must not wait behind Generate.
    page.stop_button.click(lambda flag: flag.set(), page.stop, None, concurrency_limit=None)
    page.spec_html.click(on_token_click, {page.spec_events, page.step_state}, page.step_panel, concurrency_limit=None)
    loaded = page.load_run.upload(on_load, {page.load_run, page.show_rejected}, page.run_outputs(), concurrency_limit=None)
    return [run, stepped, ended, loaded]


def _wire_run_on_screen(page: Page, shown: list) -> None:
    """Replay and export of the run on screen; `shown`: the events after which a new one is there."""
    quiet = dict(concurrency_limit=None, show_progress="hidden")

    def on_replay(values: dict):
        yield from replay.play(page, values)

    def on_scrub(values: dict):
        return replay.scrub(page, values)

    def on_rewind(values: dict):
        return replay.rewind(page, values)

    page.replay.click(on_replay, {page.run_view, page.replay_control, page.replay_speed}, page.replay_outputs(), **quiet)
    page.replay_pause.click(replay.pause, page.replay_control, None, **quiet)
    page.replay_speed.change(replay.set_speed, [page.replay_control, page.replay_speed], None, **quiet)
    page.replay_step.release(on_scrub, {page.run_view, page.replay_control, page.replay_step}, page.replay_outputs(), **quiet)
    # A new run on screen ends a replay at once (it would draw the old run over the new one) ...
    for trigger in (page.generate.click, page.load_run.upload):
        trigger(replay.pause, page.replay_control, None, **quiet)
    # ... and once it is there, the slider spans its steps and the download buttons hold its files.
    for event in shown:
        event.then(export.download_updates, page.run_view, [page.export_json, page.export_csv], show_progress="hidden")
        event.then(on_rewind, {page.run_view, page.replay_control}, [page.replay_step], show_progress="hidden")


def _wire_settings(page: Page) -> None:
    """What follows a control as it changes: the pair's description and draft variant, the lossy
    lane, the Engine choice, the Advanced label, the rejected tokens shown or hidden."""
    def describe(name):
        return gr.update(info=PRESETS[name].description if name in PRESETS else None)

    def on_engine(engine):
        return engine_choice.shown_for(page, engine)

    page.pair.change(describe, page.pair, page.pair)
    # Each pair starts on its fastest exact configuration measured on this kind of machine, and says which.
    page.pair.change(lambda name: advanced.pair_defaults(name, pick_device()), page.pair,
                     [*(getattr(page, name) for name in advanced.PAIR_CONTROLS), page.defaults_note])
    page.plain_int4.change(lambda on: gr.update(visible=bool(on)), page.plain_int4, page.lossy_lane, concurrency_limit=None)
    page.engine.change(on_engine, page.engine, [page.engine_urls, page.start_llamacpp, page.engine_note], concurrency_limit=None)
    page.start_llamacpp.click(engine_choice.start_llamacpp, None, [page.spec_url, page.plain_url, page.engine_note],
                              api_name="start_llamacpp", concurrency_limit=1)
    # One listener for every Advanced control, one call at a time: two quick changes (a box typed in,
    # a checkbox ticked) are relabelled in the order they were made, so an older call, carrying the
    # values of its moment, never finishes last and leaves a stale line.
    controls = page.advanced_controls()
    gr.on([control.change for control in controls], advanced.relabel, controls, page.advanced,
          concurrency_limit=1, concurrency_id="advanced-summary", show_progress="hidden")
    page.show_rejected.change(render.render_spans, [page.spec_events, page.show_rejected], page.spec_html,
                              concurrency_limit=None)


def _wire_presenting(page: Page, demo: gr.Blocks) -> None:
    """The two switches act in the browser only; a closed tab ends its run."""
    page.lecture_view.change(None, page.lecture_view, None, js=TOGGLE_JS.format(cls="lecture"))
    page.theme.change(None, page.theme, None, js=TOGGLE_JS.format(cls="dark"))
    demo.load(None, None, [page.lecture_view, page.theme], js=INIT_JS)

    def on_unload(request: gr.Request):  # before the run's next step
        stop_session(request.session_hash)

    demo.unload(on_unload)


def launch_kwargs() -> dict:
    """Gradio 6 takes the theme and the css at launch(), not in Blocks()."""
    return {"css_paths": [ASSETS / "style.css"], "theme": gr.themes.Soft()}
