"""Presenting: the legend with two switches, a lecture-hall view (large text readable at 1280x720,
wide panes, the settings folded away) and a dark theme.

Both switches set a class on <body> in the browser ("lecture", and Gradio's own "dark"), so they
cost the server nothing and cannot disturb a run. `?lecture=1` in the address opens the page in the
lecture-hall view and Gradio's `?__theme=dark` in the dark theme; the switches follow.
"""

from __future__ import annotations

import gradio as gr

from . import render
from .page import Page

# (on) -> toggle a class on <body>; returns its input so the checkbox keeps its value.
TOGGLE_JS = "(on) => {{ document.body.classList.toggle('{cls}', !!on); return on; }}"

# On load: the switches show what the page is in (the address may have asked for either).
INIT_JS = """() => {
  const lecture = new URLSearchParams(window.location.search).get('lecture') === '1';
  document.body.classList.toggle('lecture', lecture);
  return [lecture, document.body.classList.contains('dark')];
}"""


def header(page: Page) -> None:
    """The legend (what each colour and line means) and the two switches, on one row."""
    with gr.Row(elem_id="present-bar", equal_height=True):
        gr.HTML(render.render_legend(), elem_id="legend")
        page.lecture_view = gr.Checkbox(False, label="Lecture-hall view", elem_id="lecture-view", scale=0, min_width=220)
        page.theme = gr.Checkbox(False, label="Dark theme", elem_id="theme", scale=0, min_width=160)


def wire(page: Page, demo: gr.Blocks) -> None:
    page.lecture_view.change(None, page.lecture_view, None, js=TOGGLE_JS.format(cls="lecture"))
    page.theme.change(None, page.theme, None, js=TOGGLE_JS.format(cls="dark"))
    demo.load(None, None, [page.lecture_view, page.theme], js=INIT_JS)
