"""The page's Engine choice: a live run read from a llama.cpp server (here a stand-in that streams
llama-server's chunk format) fills the same lanes as this project's engine, shows the rejected
drafts it only counted, and a server that is not there ends the run with one line while the page
keeps serving. No build, no model server."""

from __future__ import annotations

import gradio as gr
import pytest

from app import live
from specdec.engines import ours
from specdec.serving import pairs
from specdec.core.events import check_invariants
from tests.support.live import no_progress, settings, status_details, status_line
from tests.support.llamacpp import SPEC_STEPS

pytestmark = pytest.mark.usefixtures("fp32_store")  # tests/conftest.py


def last(frames):
    out = {}
    for f in frames:
        out.update(f)
    return out


def test_a_llamacpp_run_fills_both_lanes_and_shows_the_counted_rejections(page, servers):
    spec_url, plain_url = servers
    values = settings(page, engine="llama.cpp", spec_url=spec_url, plain_url=plain_url, max_new=10)
    out = last(live.live_run(page, values, no_progress))
    spec, plain = out[page.spec_events], out[page.plain_events]
    check_invariants(spec)
    check_invariants(plain)
    assert [e.engine for e in spec] == ["llama.cpp"] * len(SPEC_STEPS)
    assert [list(e.emitted) for e in spec] == [s[0] for s in SPEC_STEPS]
    assert [e.unseen_rejected for e in spec] == [0, 2, 0, 4]
    assert "tok-unseen" in out[page.spec_html] and "\u00d72" in out[page.spec_html]  # the two rejected drafts of step 1, counted
    assert "llama.cpp server at " + spec_url in status_line(out[page.status])
    assert "tokenizer" in status_details(out[page.status])  # behind the line's disclosure
    assert out[page.stats]  # the stats row is drawn from what the engine reported


def test_a_server_that_is_not_there_ends_the_run_in_one_line(page, monkeypatch):
    warnings = []
    monkeypatch.setattr(gr, "Warning", lambda message: warnings.append(message))
    values = settings(page, engine="llama.cpp", spec_url="http://127.0.0.1:9", plain_url="", max_new=8)
    out = last(live.live_run(page, values, no_progress))
    assert len(warnings) == 1 and "\n" not in warnings[0] and "127.0.0.1:9" in warnings[0]
    assert warnings[0] in status_line(out[page.status])  # on the line, not behind its disclosure
    # the page keeps serving: this project's engine runs next
    out = last(live.live_run(page, settings(page, max_new=8), no_progress))
    assert out[page.spec_events] and out[page.spec_events][0].engine == "specdec"


@pytest.mark.parametrize("change, named", [({"temperature": 0.7}, "temperature"), ({"spec_url": ""}, "base URL"),
                                          ({"engine": "mystery"}, "engine must be one of")])
def test_settings_a_remote_run_cannot_honour_are_named(page, monkeypatch, change, named):
    monkeypatch.setattr(gr, "Warning", lambda message: None)
    values = settings(page, **({"engine": "llama.cpp", "spec_url": "http://127.0.0.1:9"} | change))
    out = last(live.live_run(page, values, no_progress))
    line = status_line(out[page.status])
    assert line.startswith("Not started") and named in line


def test_text_before_its_steps_streams_uncoloured_then_the_steps_colour_it(page, monkeypatch):
    from app import engine_choice
    from app.view import RunView, frame
    from specdec.core.config import GenerationConfig
    from specdec.engines.vllm import PendingText

    pair = pairs.shared_store().get("tiny-random")  # any StepEvent will do: one from a run of this project's engine on tiny-random
    event = next(iter(ours.OurSource(pair, GenerationConfig(max_new_tokens=2)).run("def f(x):")))
    items = [PendingText((5,), ("<b>",), 1, 0.1), PendingText((6,), (" x",), 2, 0.2), event]
    monkeypatch.setattr(engine_choice, "remote_updates", lambda *a, **k: iter(items))
    lanes = list(engine_choice.remote_lanes("vllm", "http://x", "", "p", pair, GenerationConfig(), compare=False))
    assert [name for name, _ in lanes] == ["spec_pending", "spec_pending", "spec"]
    view = RunView(config=GenerationConfig(), dtype_name="fp32", pending={"spec": ["<b>", " x"]})
    html = frame(page, view, plots=False)[page.spec_html]
    assert html.count("tok-pending") == 2 and "&lt;b&gt;" in html and "<b>" not in html  # escaped, uncoloured
    view.spec.append(event)
    assert "tok-pending" not in frame(page, view, plots=False)[page.spec_html]  # the steps replace it
