"""The page's components, declared: `Page` names every component a handler reads or writes, section
by section, in the order of the page, and `StopFlag` is a session's stop signal. app/page.py lays
the page out and fills a Page in; every module that reads or writes a component imports the
declaration from here, below all of them, so none of them imports the layout.
"""

from __future__ import annotations

import threading

import gradio as gr


class StopFlag(threading.Event):
    """Per-session stop signal. gr.State deep-copies its initial value for each session; a lock
    cannot be copied, so a copy is simply a fresh flag."""

    def __deepcopy__(self, memo):
        return StopFlag()


class Page:
    """Every component a handler reads or writes, in the order of the page. Components no handler
    touches (titles, the legend, the How it works tab) are laid out in build_page without a name."""

    # Above the tabs: the legend and its two switches (they act in the browser only: app/ui.py)
    lecture_view: gr.Checkbox
    theme: gr.Checkbox
    # Per session (gr.State)
    stop: gr.State  # a StopFlag: Stop sets it, the engine checks it before each step
    spec_events: gr.State  # the StepEvents on screen
    plain_events: gr.State
    run_view: gr.State  # the app.view.RunView on screen (live, finished or loaded): what replay and export read

    # Live tab: the prompt, Generate, and the settings that change what the page shows
    prompt: gr.Textbox
    generate: gr.Button
    stop_button: gr.Button
    pair: gr.Dropdown
    k: gr.Slider
    temperature: gr.Slider
    max_new: gr.Slider
    compare: gr.Checkbox  # run plain decoding after the speculative run
    defaults_note: gr.HTML  # what the settings start on for this pair and machine, and why (app/advanced.defaults_line)
    # Live tab, folded into Advanced: how a run is made (app/advanced.py sums them up in its label)
    advanced: gr.Accordion
    drafter: gr.Radio
    draft_variant: gr.Dropdown
    target_kernel: gr.Dropdown
    runner: gr.Radio
    adaptive: gr.Checkbox  # K policy "adaptive"
    cost_k: gr.Checkbox  # K policy "cost"
    top_p: gr.Slider
    top_k: gr.Number
    seed: gr.Number
    engine: gr.Radio  # this project's engine or a real engine's servers (app/engine_choice.py)
    engine_urls: gr.Row  # shown for a remote engine
    spec_url: gr.Textbox
    plain_url: gr.Textbox
    start_llamacpp: gr.Button
    engine_note: gr.Markdown
    plain_int4: gr.Checkbox  # the lossy lane: plain decoding on an int4 target
    show_rejected: gr.Checkbox
    # Live tab: the run
    status: gr.Markdown
    spec_html: gr.HTML  # the token panes
    plain_html: gr.HTML
    stats: gr.HTML
    lossy_lane: gr.Column  # shown when plain_int4 is on
    lossy_note: gr.HTML
    lossy_html: gr.HTML
    # Live tab: replay (app/replay.py)
    replay_control: gr.State  # a ReplayControl
    replay: gr.Button
    replay_pause: gr.Button
    replay_speed: gr.Radio
    replay_step: gr.Slider
    # Live tab: export and load (app/export.py)
    export_json: gr.DownloadButton
    export_csv: gr.DownloadButton
    load_run: gr.UploadButton
    # Live tab: why this speedup (app/theory.py)
    predictions: gr.HTML
    # Live tab: the step panel (app/step_panel.py, app/stepping.py)
    step_state: gr.State  # a StepSession: the stepped run held between clicks
    step_button: gr.Button
    run_to_end: gr.Button
    step_panel: gr.HTML
    # Live tab: the charts (app/charts.py)
    acc_plot: gr.Plot
    thr_plot: gr.Plot
    tpp_plot: gr.Plot
    position_plot: gr.Plot  # per drafter: acceptance by draft position
    lengths_plot: gr.Plot  # per drafter: how many drafts each step kept

    # Theory tab (app/theory.py, app/theory_run.py)
    theory_state: gr.State  # a TheorySession
    k_curve: gr.Plot
    k_caption: gr.Markdown
    codesign: gr.Plot
    codesign_caption: gr.Markdown
    sweep_button: gr.Button
    measure_button: gr.Button
    theory_status: gr.Markdown
    passcost_plot: gr.Plot
    passcost_caption: gr.Markdown

    def settings(self) -> set:
        """The controls a run reads (passed to handlers as one dict)."""
        return {self.prompt, self.pair, self.drafter, self.k, self.adaptive, self.temperature, self.top_p,
                self.top_k, self.max_new, self.seed, self.compare, self.show_rejected, self.draft_variant, self.plain_int4,
                self.cost_k, self.target_kernel, self.runner, self.engine, self.spec_url, self.plain_url}

    def advanced_controls(self) -> list:
        """The Advanced controls, in the order of app.advanced.AdvancedValues' fields."""
        return [self.drafter, self.draft_variant, self.target_kernel, self.runner, self.adaptive, self.cost_k,
                self.top_p, self.top_k, self.seed, self.engine, self.spec_url, self.plain_url,
                self.plain_int4, self.show_rejected]

    def plots(self) -> list:
        return [self.acc_plot, self.thr_plot, self.tpp_plot, self.position_plot, self.lengths_plot]

    def theory_outputs(self) -> list:
        return [self.k_curve, self.k_caption, self.codesign, self.codesign_caption, self.passcost_plot,
                self.passcost_caption, self.theory_status]

    def run_outputs(self) -> list:
        """Everything a frame of a run may update."""
        return [self.status, self.spec_html, self.plain_html, self.stats, self.predictions, *self.plots(),
                self.lossy_html, self.lossy_note, *self.theory_outputs(), *self.run_states()]

    def run_states(self) -> list:
        """The per-session state a frame of a run writes (a replay frame leaves it alone)."""
        return [self.spec_events, self.plain_events, self.run_view]

    def replay_outputs(self) -> list:
        """What a replay frame updates: a run's outputs without its per-session state, and the slider."""
        states = self.run_states()
        return [c for c in self.run_outputs() if c not in states] + [self.replay_step]
