"""Presenting: the legend with two switches, a lecture-hall view (large text readable at 1280x720,
wide panes, the settings folded away) and a dark theme.

Both switches set a class on <body> in the browser ("lecture", and Gradio's own "dark"), so they
cost the server nothing and cannot disturb a run. `?lecture=1` in the address opens the page in the
lecture-hall view and Gradio's `?__theme=dark` in the dark theme; the switches follow.
"""

from __future__ import annotations

import gradio as gr

from . import render
from .layout import Page

# (on) -> toggle a class on <body>; returns its input so the checkbox keeps its value.
TOGGLE_JS = "(on) => {{ document.body.classList.toggle('{cls}', !!on); return on; }}"

# On load: the switches show what the page is in (the address may have asked for either).
INIT_JS = """() => {
  const lecture = new URLSearchParams(window.location.search).get('lecture') === '1';
  document.body.classList.toggle('lecture', lecture);
  return [lecture, document.body.classList.contains('dark')];
}"""

# Runs once when the page loads (launch(js=...)): keep the newest tokens of a pane in view as the
# pane grows, unless the reader has scrolled up in it. A pane's HTML may be replaced on any frame,
# so whether to follow is remembered per pane (by its component's id), from scroll events.
PAGE_JS = """() => {
  const follow = new Map();
  document.addEventListener('scroll', (e) => {
    const pane = e.target.closest ? e.target.closest('.tokens') : null;
    const host = pane && pane.closest('[id]');
    if (host) follow.set(host.id, pane.scrollHeight - pane.scrollTop - pane.clientHeight < 24);
  }, true);
  const scroll = () => {
    for (const pane of document.querySelectorAll('.tokens')) {
      const host = pane.closest('[id]');
      if (host && follow.get(host.id) !== false) pane.scrollTop = pane.scrollHeight;
    }
  };
  new MutationObserver(scroll).observe(document.body, {childList: true, subtree: true});
  // The lecture-hall view re-flows the panes: follow again when it is switched.
  new MutationObserver(scroll).observe(document.body, {attributes: true, attributeFilter: ['class']});
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
