"""app/page.py: the page is declared whole. build_page builds exactly the components Page declares
(and refuses to return a page that differs), and the Advanced controls are listed in the order of
app.advanced.AdvancedValues' fields, which the accordion's label reads them in."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr
import pytest

from app import advanced
from app.page import Page, build_page
from specdec.models.pair import pick_device


def built() -> Page:
    with gr.Blocks():
        return build_page("tiny-random", pairs=("tiny-random",))


def test_every_declared_component_is_built_and_nothing_else():
    page = built()
    assert set(vars(page)) == set(Page.__annotations__)
    assert all(isinstance(component, (gr.components.Component, gr.blocks.BlockContext)) for component in vars(page).values())


def test_a_component_declared_but_not_built_is_refused(monkeypatch):
    monkeypatch.setitem(Page.__annotations__, "forgotten", "gr.Button")
    with pytest.raises(TypeError, match=r"not built \['forgotten'\]"):
        built()


def test_the_advanced_controls_hold_the_advanced_defaults_in_their_order():
    page = built()
    controls = page.advanced_controls()
    values = advanced.AdvancedValues(*(control.value for control in controls))
    empty_boxes = dict(spec_url=None, plain_url=None)  # a text box holds None until something is typed in
    assert values == replace(advanced.defaults("tiny-random", pick_device()), **empty_boxes)
    assert len({id(c) for c in controls}) == len(controls)
    assert page.advanced.label == advanced.summary(values)
