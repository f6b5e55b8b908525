"""Precision: $SPECDEC_DTYPE overrides the automatic choice, and the engine holds its contract in
whatever dtype it runs. `make test` runs the tests marked `precision` twice: once in fp32 (the
default here) and once with SPECDEC_DTYPE=bf16, so a machine of either CPU kind checks both paths."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.runs import run_checked, tokens
from specdec.measure.compare import TIE_MARGIN, first_difference
from specdec.core.config import GenerationConfig
from specdec.models.dtypes import DTYPES
from specdec.models.pair import load_pair, pick_dtype

ROOT = Path(__file__).resolve().parent.parent
PRECISION = os.environ.get("SPECDEC_DTYPE") or "fp32"  # what the precision-marked tests run in
PROMPTS = ["def add(a, b):\n    return a + b\n\ndef add(a, b):", "for i in range(10):", "The quick brown fox"]


def test_override_wins_over_the_automatic_choice(monkeypatch):
    cpu = torch.device("cpu")
    for name, dtype in DTYPES.items():
        monkeypatch.setenv("SPECDEC_DTYPE", name)
        assert pick_dtype(cpu) == dtype
    monkeypatch.setenv("SPECDEC_DTYPE", "fp16")
    assert pick_dtype(cpu, "fp32") == torch.float32  # an explicit dtype (the CLI's --dtype) wins


def test_automatic_choice_follows_the_cpu(monkeypatch):
    monkeypatch.delenv("SPECDEC_DTYPE", raising=False)
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert pick_dtype(torch.device("cpu")) == (torch.bfloat16 if native else torch.float32)


@pytest.mark.parametrize("value", ["fp64", "BF16", "half"])
def test_unknown_override_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("SPECDEC_DTYPE", value)
    with pytest.raises(ValueError, match=r"SPECDEC_DTYPE must be one of bf16, fp32, fp16, got") as err:
        pick_dtype(torch.device("cpu"))
    assert value in str(err.value)


def test_cli_names_the_variable_in_one_line(monkeypatch, capsys):
    from specdec.__main__ import main

    monkeypatch.setenv("SPECDEC_DTYPE", "fp64")
    assert main(["generate", "--pair", "tiny-random", "--prompt", "hi", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == ["error: SPECDEC_DTYPE must be one of bf16, fp32, fp16, got 'fp64'"]
    # --dtype wins over the variable, so the same call with --dtype runs
    assert main(["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "hi", "--max-new-tokens", "2"]) == 0


def test_app_refuses_an_unknown_override_at_start():
    env = dict(os.environ, SPECDEC_DTYPE="fp64", SPECDEC_PRELOAD="0", HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == ["error: SPECDEC_DTYPE must be one of bf16, fp32, fp16, got 'fp64'"]


@pytest.fixture(scope="module")
def pair():
    # The automatic path, as the app takes it: no dtype given, so $SPECDEC_DTYPE decides.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPECDEC_DTYPE", PRECISION)
        return load_pair("tiny-random", device="cpu")


@pytest.mark.precision
def test_the_pair_runs_in_the_chosen_dtype(pair):
    assert pair.dtype_name == PRECISION
    assert pair.target.dtype == pair.draft.dtype == DTYPES[PRECISION]


@pytest.mark.precision
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("drafter, k", [("model", 2), ("model", 5), ("lookup", 4), ("auto", 5)])
def test_greedy_equals_plain_or_differs_at_a_reported_tie(pair, prompt, drafter, k):
    plain = run_checked(pair, prompt, GenerationConfig(drafter="none", max_new_tokens=64))
    spec = run_checked(pair, prompt, GenerationConfig(drafter=drafter, k=k, max_new_tokens=64))
    assert sum(len(e.drafted) for e in spec) > 0
    diff = first_difference(spec, plain, pair.dtype_name)
    if PRECISION == "fp32":
        assert diff is None and tokens(spec) == tokens(plain)
        return
    # bf16/fp16: one pass over K+1 positions rounds differently from K+1 single passes, so a
    # near-tie may flip. Then the report must say where, show the margin, and call it a tie.
    if diff is not None:
        assert tokens(spec)[: diff.index] == tokens(plain)[: diff.index]
        assert diff.margin < TIE_MARGIN[PRECISION] and diff.is_tie, diff


@pytest.mark.precision
def test_sampling_keeps_the_contract(pair):
    from specdec.measure.metrics import summarize

    events = run_checked(pair, PROMPTS[0], GenerationConfig(k=4, temperature=1.0, top_p=0.95, seed=3, max_new_tokens=64))
    assert 0.1 < summarize(events).accepted_share < 0.95
    assert all(0.0 <= p <= 1.0 for e in events for p in e.p_target + e.p_draft)
