"""The compiled runner on a CPU: the static runner's fixed-shape passes compiled whole
(torch.compile, fullgraph=True, static shapes), each once per model and process. It emits the eager
runner's events (fp32, tiny-random); no pass recompiles while K changes from step to step nor in a
later run; and a pass that cannot be captured runs static, with one logged line saying why.
scripts/gpu_check.sh runs the same tests on CUDA (SPECDEC_TEST_DEVICE=cuda), where the passes are
CUDA graphs and nothing is compiled."""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import pytest
import torch

from tests.support.runs import run_checked
from tests.support.runner_checks import assert_same_events
from specdec.core.config import GenerationConfig
from specdec.core.runners import capture
from specdec.core.runners.capture import compiled_model
from specdec.engines.ours import OurSource
from specdec.measure.passcost import PassCosts

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
SLOPED = PassCosts(SIZES, tuple(0.01 * (1 + 0.3 * n) for n in SIZES), 0.003, 200, 3)  # K moves every few steps
CONFIG = GenerationConfig(k=2, k_policy="cost", k_max=4, max_new_tokens=40)
TEST_DEVICE = os.environ.get("SPECDEC_TEST_DEVICE", "cpu")  # as tests/conftest.py's tiny_pair
CAPTURES = "cuda_graph" if TEST_DEVICE.startswith("cuda") else "compiled_pass"  # what captures a shape there


def test_compiled_passes_emit_the_eager_events_and_never_recompile(tiny_pair):
    eager = run_checked(tiny_pair, PROMPT, CONFIG, costs=SLOPED)
    with torch._dynamo.config.patch(error_on_recompile=True):
        run = OurSource(tiny_pair, replace(CONFIG, runner="compiled")).run(PROMPT, costs=SLOPED)
        compiled = list(run)
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        # Another prompt (another length), fixed K and the draft's early stop: the same shapes, nothing compiles.
        again = run_checked(tiny_pair, "for i in range(10):", replace(CONFIG, k_policy="fixed", k=3, draft_confidence=0.5, runner="compiled"))
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    assert_same_events(compiled, eager)
    ks = [e.k for e in eager]
    assert len(set(ks)) >= 3 and sum(a != b for a, b in zip(ks, ks[1:])) >= 4  # K moved, and often
    target = run.runner.target  # the compiled model the run claimed: the smallest cache that holds it
    lender = compiled_model(tiny_pair.target, tiny_pair.vocab_size)
    assert target in lender.models.values() and target.kv.capacity == 512
    assert set(target.captured) == {(1, False), (2, False), (3, False), (4, False), (6, False)}  # checks of K + 1 <= 5
    assert set(run.proposers[-1].lm.captured) == {(1, True), (2, True)}  # the draft model's passes
    assert all(s > 0 for s in target.capture_s.values()) and run.runner.capture_s >= sum(target.capture_s.values())
    assert again and not lender.owners  # each run gave the model back


@pytest.fixture()
def fresh_pair():
    """A tiny pair of its own: its models have no compiled passes yet."""
    from specdec.models.pair import build_pair

    return build_pair("tiny-random", device=TEST_DEVICE, dtype="fp32")  # built anew (load_pair would return the session's)


def test_a_pass_that_cannot_be_captured_runs_static_with_one_line(fresh_pair, monkeypatch, caplog):
    def refuse(model, tokens, last_only, pool=None):
        raise RuntimeError("no compiler here\nmore detail")

    monkeypatch.setattr(capture, CAPTURES, refuse)
    config = GenerationConfig(k=3, max_new_tokens=24)
    with caplog.at_level(logging.WARNING, logger="specdec.runners"):
        compiled = run_checked(fresh_pair, PROMPT, replace(config, runner="compiled"))
    assert_same_events(compiled, run_checked(fresh_pair, PROMPT, config))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("RuntimeError: no compiler here" in line for line in lines)  # one per model
    assert not any(m.captured for m in compiled_model(fresh_pair.target, fresh_pair.vocab_size).models.values())


def test_a_second_run_while_the_first_holds_the_compiled_model_runs_static(fresh_pair, monkeypatch, caplog):
    monkeypatch.setattr(capture, CAPTURES, lambda *args: (_ for _ in ()).throw(RuntimeError("not here")))
    config = GenerationConfig(k=3, max_new_tokens=16, runner="compiled")
    first = iter(OurSource(fresh_pair, config).run(PROMPT))
    head = [next(first)]  # the first run holds both models now
    with caplog.at_level(logging.WARNING, logger="specdec.runners"):
        second = run_checked(fresh_pair, PROMPT, config)
    assert any("another run holds the compiled model" in r.getMessage() for r in caplog.records)
    assert_same_events(head + list(first), second)
    assert not compiled_model(fresh_pair.target, fresh_pair.vocab_size).owners
