"""The GPU check (scripts/gpu_check/) on a CPU: its dry run walks every section, with only the CUDA
calls stubbed, and writes the record after each; a section that fails keeps its error in one line
and the others their results; the preflight sees a transformers that ignores the engine's caches
and versions outside requirements.txt. (The compiled runner's capture is an eager stand-in here: the
same bookkeeping, without torch.compile's minutes; tests/test_compiled.py compiles for real.)"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess

import pytest
import torch

from scripts.gpu_check import main as check_main
from scripts.gpu_check import models, preflight, runs, wheels
from scripts.gpu_check.cuda import DryCuda
from scripts.gpu_check.record import Record
from specdec.core.runners import capture
from specdec.kernels.attention import ROWS

SECTIONS = ["models", "passes", "costs", "first_call_capture", "syncs", "loop_cost", "draft_graph_of_k",
            "forced_acceptance", "attention", "parity"]
DRY = ["--device", "cpu", "--tiny", "--tokens", "8", "--prompt-len", "16", "--context", "16", "--repeats", "1"]


@pytest.fixture
def eager_capture(monkeypatch):
    """A "capture" that runs the pass as it is, each time it is replayed."""
    def capture_now(model, tokens, last_only, pool=None):
        ids = model.input(tokens)
        return lambda: model.pass_now(ids, last_only)

    monkeypatch.setattr(capture, "compiled_pass", capture_now)


@pytest.fixture
def written(monkeypatch):
    """The sections done, as read back from the file each time the record is written."""
    seen = []
    real = Record.write

    def write(self):
        real(self)
        seen.append(json.loads(self.path.read_text())["done"])

    monkeypatch.setattr(Record, "write", write)
    return seen


def test_the_dry_run_walks_every_section_and_writes_the_record_after_each(tmp_path, eager_capture, written):
    out = tmp_path / "gpu_check.json"
    assert check_main.main([*DRY, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["dry_run"] and data["errors"] == {} and data["done"] == SECTIONS
    finished = [done for i, done in enumerate(written) if i == 0 or done != written[i - 1]]
    assert finished[1:] == [SECTIONS[: n + 1] for n in range(len(SECTIONS))]  # written as each section ended
    assert len(data["passes"]) == 9 and all("pass_ms" in row for row in data["passes"].values())
    assert set(data["costs"]) == {f"{pair} {runner}" for pair in models.PAIRS for runner in ("eager", "static", "compiled")}
    assert all(row is not None for row in data["first_call_capture"].values())
    assert all(counts == [None] * 4 for counts in data["syncs"].values())  # four steps each, not counted off CUDA
    assert set(data["draft_graph_of_k"]) == {"3", "5", "7"}
    assert all(row["spec"]["acceptance"] > 0.9 for row in data["forced_acceptance"].values())  # every draft kept
    assert all("first_difference" in row for row in data["loop_cost"].values())
    timed = {k: v for k, v in data["attention"].items() if k != "attention"}
    assert len(timed) == 3 * 5 and all(v["ms"] > 0 and v["sdpa_ms"] > 0 and v["max_difference"] < 0.05 for v in timed.values())
    assert len(data["parity"]) == 8 + 12 and all(v["same_events"] and v["first_difference"] is None for v in data["parity"].values())
    moved = {k: v for k, v in data["parity"].items() if k.endswith("built on cpu and moved")}
    # on a CPU the fp32 target runs the batch-invariant rows a kernel layer keeps, else the device's path
    ran = {v["attention"] for v in data["parity"].values()}
    assert len(moved) == 12 and data["attention_path"] == "specdec_packed_sdpa" and ran <= {data["attention_path"], ROWS} and ran


def test_a_section_that_fails_keeps_its_error_and_the_others_their_results(tmp_path, monkeypatch, eager_capture):
    def lost(*args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nCompile with TORCH_USE_CUDA_DSA")

    monkeypatch.setattr(runs, "sync_counts", lost)
    out = tmp_path / "gpu_check.json"
    assert check_main.main([*DRY, "--out", str(out), "--runners", "eager,static", "--loop-runner", "static"]) == 1
    data = json.loads(out.read_text())
    assert data["errors"] == {"syncs": "RuntimeError: CUDA error: an illegal memory access was encountered"}
    assert data["syncs"] is None and data["done"] == [s for s in SECTIONS if s != "draft_graph_of_k"]
    for kept in ("passes", "costs", "loop_cost", "forced_acceptance", "parity"):
        assert data[kept], kept


def test_a_section_that_needs_a_failed_one_is_skipped_with_one_line(tmp_path):
    record = Record(str(tmp_path / "r.json"), {})
    record.section("first", lambda: 1 / 0)
    ran = []
    record.section("second", lambda: ran.append(1), needs=("first",))
    data = json.loads((tmp_path / "r.json").read_text())
    assert not ran and data["errors"] == {"first": "ZeroDivisionError: division by zero",
                                          "second": "skipped: needs first, which did not finish"}


def test_the_sync_count_survives_a_run_that_ends_early():
    """The crash this replaces: with every draft accepted, a short run ended before the steps it
    counted, and next(run) raised StopIteration. Now the count comes back shorter."""
    args = check_main.parse(DRY + ["--runners", "eager,static", "--loop-runner", "static"])
    built = {name: models.build(name, args) for name in ("1.5b", "0.5b")}
    models.force_acceptance(built)
    counts = runs.sync_counts(built, args, DryCuda(args.device), tokens=12)  # 2 steps of K + 1 = 6 tokens
    assert counts == {"eager": [], "static": []}


def test_the_preflight_passes_on_the_projects_python():
    problems, worst = preflight.cache_problems(torch.device("cpu"))
    assert preflight.version_problems() == [] and problems == [] and worst < preflight.TOLERANCE


def test_the_preflight_sees_a_cache_that_is_not_used(monkeypatch):
    """What a transformers older than 5.24 does with `cache=`: it goes into **kwargs, unused."""
    from transformers import Qwen2Model

    real = Qwen2Model.forward  # what the runners call (the decoder; the head is applied apart)
    monkeypatch.setattr(Qwen2Model, "forward", lambda self, *args, cache=None, **kwargs: real(self, *args, **kwargs))
    problems, _ = preflight.cache_problems(torch.device("cpu"))
    assert len(problems) == 2
    assert problems[0] == "the eager cache holds 0 positions after a pass over 5 tokens (`cache=` ignored?)"
    assert problems[1].startswith("a pass through the static cache failed (RuntimeError: ")  # its mask covers slots no cache has


def test_the_preflight_names_a_version_outside_requirements_in_one_line(monkeypatch, capsys):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "5.17.0" if name == "transformers" else real(name))
    problems = preflight.version_problems()
    assert "transformers 5.17.0 is installed, requirements.txt needs transformers<5.40,>=5.24" in problems
    assert preflight.main() == 1
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and printed[0].startswith("gpu_check preflight FAILED") and "5.17.0" in printed[0]


def test_the_wheels_are_this_projects_versions_and_stay_out_of_git():
    assert wheels.wanted() == [f"{name}=={importlib.metadata.version(name)}" for name in wheels.CARRIED]
    ignored = subprocess.run(["git", "check-ignore", "-q", ".whl/transformers-5.24.0-py3-none-any.whl"], cwd=preflight.ROOT)
    assert ignored.returncode == 0
