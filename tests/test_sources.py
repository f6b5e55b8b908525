"""Every engine is a StepSource that declares what it can do: our engine as well as llama.cpp's and
vLLM's servers. The chooser (specdec.engines.choice) is the one place that goes from a name to them."""

from __future__ import annotations

from dataclasses import fields

import pytest

from specdec.core.config import GenerationConfig
from specdec.core.events import check_invariants
from specdec.engines import choice
from specdec.engines.base import ENGINES, SPECDEC, Capabilities
from specdec.engines.ours import OurSource
from tests.support.runs import run_checked, tokens


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_s_source_declares_its_name_and_capabilities(engine):
    source = choice.source_class(engine)
    assert source.engine == engine
    assert isinstance(source.capabilities, Capabilities) and choice.capabilities(engine) is source.capabilities
    assert all(isinstance(getattr(source.capabilities, f.name), bool) for f in fields(Capabilities))
    assert hasattr(source, "iter_events") and choice.label(engine)


def test_only_our_engine_runs_here_with_the_page_s_settings_and_a_remote_one_needs_a_server():
    ours = choice.capabilities(SPECDEC)
    assert ours.in_process and ours.follows_settings and ours.steps_through and ours.sweeps_k and ours.reports_p_q
    for engine in choice.REMOTE:
        can = choice.capabilities(engine)
        assert not (can.in_process or can.follows_settings or can.steps_through or can.sweeps_k or can.reports_p_q)
        assert choice.server_module(engine).start_server


def test_a_name_the_project_does_not_know_is_named_or_claims_nothing():
    with pytest.raises(ValueError, match="engine must be one of specdec, llama.cpp, vllm, got 'mystery'"):
        choice.capabilities("mystery")
    with pytest.raises(ValueError, match="to start a server"):
        choice.server_module(SPECDEC)
    assert not any(getattr(choice.of_events("an engine of a saved run"), f.name) for f in fields(Capabilities))


def test_our_source_gives_the_events_of_a_run_from_prompt_ids_and_its_plain_lane_drafts_nothing(tiny_pair):
    config = GenerationConfig(max_new_tokens=12, k=3)
    source = OurSource(tiny_pair, config)
    prompt_ids = tiny_pair.encode_prompt("def f(x):", chat=tiny_pair.chat, max_new_tokens=12)
    events = list(source.iter_events(prompt_ids, 12))
    check_invariants(events)
    assert tokens(events) == tokens(run_checked(tiny_pair, "def f(x):", config))
    assert tokens(events) == tokens(source.run("def f(x):"))
    plain = list(source.plain().run("def f(x):"))
    assert plain and all(not e.drafted for e in plain) and all(e.engine == SPECDEC for e in plain)
    assert len(list(source.iter_events(prompt_ids, 4))) <= 4  # the length given, not the config's
