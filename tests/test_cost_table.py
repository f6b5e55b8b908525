"""specdec.measure.cost_table on tiny-random: measured once per (pair, kernel, draft variant, dtype,
runner) and machine, cached on disk, read back without measuring, measured again on request; a
trained head's step kept in the same file by the head file's digest."""

import json

import pytest

from specdec.measure import cost_table, passcost
from specdec.measure.passcost import DraftCost


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(cost_table, "_tables", {})
    monkeypatch.setattr(cost_table, "_head_steps", {})
    return tmp_path


@pytest.fixture
def count_measurements(monkeypatch):
    calls = []
    real = cost_table.measure_models

    def counting(target, *args, **kwargs):
        calls.append(target)
        return real(target, *args, **kwargs)

    monkeypatch.setattr(cost_table, "measure_models", counting)
    return calls


def test_measured_once_then_read_from_disk(tiny_pair, cache, count_measurements, monkeypatch):
    costs = cost_table.measure(tiny_pair, repeats=1)
    assert costs.sizes == cost_table.SIZES and all(t > 0 for t in costs.target_s) and costs.draft_s > 0
    assert costs.context == cost_table.CONTEXT and len(count_measurements) == 1
    (path,) = (cache / "costs").rglob("*.json")
    assert path.name == "tiny-random.dense.dense.fp32.eager.json"
    data = json.loads(path.read_text())
    assert data["key"] == {"pair": "tiny-random", "target_kernel": "dense", "draft_variant": "dense", "dtype": "fp32", "runner": "eager"}
    assert data["machine"]["torch"] and "threads" in data["machine"]
    from specdec.measure.stream_rate import streamed_bytes  # the decode step's limit travels with the table

    assert costs.streamed_bytes == streamed_bytes(tiny_pair.target) == data["costs"]["streamed_bytes"] > 0
    assert costs.read_rate == data["costs"]["read_rate"] > 0 and costs.limit_s == costs.streamed_bytes / costs.read_rate
    monkeypatch.setattr(cost_table, "_tables", {})  # a new process: only the file is left
    assert cost_table.measure(tiny_pair) == costs and len(count_measurements) == 1
    again = cost_table.measure(tiny_pair, repeats=1, refresh=True)
    assert len(count_measurements) == 2 and again.sizes == costs.sizes
    assert cost_table.measure(tiny_pair) == again  # the refreshed table is the one kept


def test_one_table_per_kernel_and_variant_and_the_kernel_module_is_timed(tiny_pair, cache, count_measurements):
    asked = []

    def target():
        asked.append(1)
        return tiny_pair.target

    cost_table.measure(tiny_pair, kernel="int8", target=target, draft_variant="int8", repeats=1)
    cost_table.measure(tiny_pair, kernel="int8", target=target, draft_variant="int8", repeats=1)
    assert asked == [1] and count_measurements == [tiny_pair.target]  # the module is built only to measure
    cost_table.measure(tiny_pair, kernel="q4k", target=tiny_pair.target, draft_variant="int8", repeats=1)
    names = sorted(p.name for p in (cache / "costs").rglob("*.json"))
    assert names == ["tiny-random.int8.int8.fp32.eager.json", "tiny-random.q4k.int8.fp32.eager.json"]


def test_a_damaged_table_is_measured_again(tiny_pair, cache, count_measurements, monkeypatch):
    cost_table.measure(tiny_pair, repeats=1)
    (path,) = (cache / "costs").rglob("*.json")
    path.write_text('{"format": "specdec-costs", "version": 1, "costs": {"sizes": [1], "target_s": [-1]}}')
    monkeypatch.setattr(cost_table, "_tables", {})
    assert cost_table.measure(tiny_pair, repeats=1).target_s[0] > 0 and len(count_measurements) == 2


def test_progress_bar_and_costs_for_a_config(tiny_pair, cache, capsys):
    from specdec.core.config import GenerationConfig

    costs = cost_table.costs_for(tiny_pair, GenerationConfig(k_policy="cost", draft_variant="int4"), progress=True)
    assert "pass costs of tiny-random" in capsys.readouterr().err
    assert list((cache / "costs").rglob("tiny-random.dense.int4.fp32.eager.json")) and costs.draft_s > 0


def test_a_run_without_the_draft_model_reads_the_target_only_table(tiny_pair, cache, count_measurements):
    """Prompt lookup (and the head) never run the draft model: their table times no draft, whatever
    draft variant the settings name, and a second such run measures nothing."""
    from specdec.core.config import GenerationConfig

    lookup = GenerationConfig(k_policy="cost", drafter="lookup", draft_variant="int4")
    costs = cost_table.costs_for(tiny_pair, lookup)
    assert costs.draft_s is None and costs.draft_feed_s is None and len(count_measurements) == 1
    assert [p.name for p in (cache / "costs").rglob("*.json")] == ["tiny-random.dense.none.fp32.eager.json"]
    cost_table.costs_for(tiny_pair, GenerationConfig(k_policy="cost", drafter="lookup", draft_variant="dense"))
    assert len(count_measurements) == 1
    assert cost_table.costs_for(tiny_pair, GenerationConfig(k_policy="cost", drafter="auto", draft_variant="int4")).draft_s > 0


def test_one_table_per_runner_timed_as_that_runner_runs(tiny_pair, cache, count_measurements, monkeypatch):
    from specdec.core.config import GenerationConfig
    from specdec.core.runners import static_model

    runs = []
    real_run = static_model.StaticModel.run
    monkeypatch.setattr(static_model.StaticModel, "run", lambda self, *a, **k: runs.append(a[0]) or real_run(self, *a, **k))
    eager = cost_table.measure(tiny_pair, repeats=1)
    static = cost_table.costs_for(tiny_pair, GenerationConfig(k_policy="cost", runner="static"))
    assert len(count_measurements) == 2 and static.sizes == eager.sizes and static.draft_s > 0
    assert set(runs) == set(cost_table.SIZES)  # the static table timed the static model's fixed-shape passes
    names = sorted(p.name for p in (cache / "costs").rglob("*.json"))
    assert names == ["tiny-random.dense.dense.fp32.eager.json", "tiny-random.dense.dense.fp32.static.json"]
    assert json.loads((cache / "costs").rglob("*.static.json").__next__().read_text())["key"]["runner"] == "static"


def test_machine_folder_names_the_cpu_and_changes_with_what_decides_the_figures():
    import torch

    info = cost_table.machine(torch.device("cpu"))
    assert info["device"] == "cpu" and set(info["cpu_flags"]) <= set(cost_table.CPU_FLAGS)
    folder = cost_table.machine_folder(info)
    assert folder != cost_table.machine_folder({**info, "threads": info["threads"] + 1})
    assert folder != cost_table.machine_folder({**info, "cpu_flags": [*info["cpu_flags"], "avx512_bf16"]})
    assert folder != cost_table.machine_folder({**info, "kernels": "another build"})  # a changed kernel is timed anew


def test_the_head_step_is_kept_with_the_table_by_the_head_file_digest(tiny_pair, cache, count_measurements, monkeypatch):
    from specdec.core.proposers.head import HeadSource

    timed = []

    def time_head_step(source, dtype, device, context, repeats, streamed):
        assert streamed == costs_alone.streamed_bytes  # the first draft is timed after what the target's pass reads
        timed.append(source.digest)
        return DraftCost(0.002 * len(timed), 0.001 * len(timed))  # 1 ms a further draft the first time, 2 ms the second

    monkeypatch.setattr(cost_table, "time_head_step", time_head_step)
    head = HeadSource(make=lambda: None, vocab_size=tiny_pair.vocab_size, label="head.safetensors", digest="aaaa")
    costs_alone = cost_table.measure(tiny_pair, repeats=1)
    costs = cost_table.measure(tiny_pair, repeats=1, head=head)
    assert (costs.head_first_s, costs.head_s) == (0.002, 0.001) and costs.draft_s > 0
    assert timed == ["aaaa"] and len(count_measurements) == 1
    (path,) = (cache / "costs").rglob("*.json")
    assert json.loads(path.read_text())["costs"]["head_s"] == {"aaaa": 0.001}
    assert json.loads(path.read_text())["costs"]["head_first_s"] == {"aaaa": 0.002}
    monkeypatch.setattr(cost_table, "_tables", {})  # a new process: only the file is left
    monkeypatch.setattr(cost_table, "_head_steps", {})
    assert cost_table.measure(tiny_pair, head=head) == costs and timed == ["aaaa"] and len(count_measurements) == 1
    assert cost_table.measure(tiny_pair).head_s is None  # a run without the head reads the draft model's pass only
    retrained = HeadSource(make=lambda: None, vocab_size=tiny_pair.vocab_size, label="head.safetensors", digest="bbbb")
    assert cost_table.measure(tiny_pair, head=retrained).head_s == 0.002  # another file's tensors: timed anew
    assert timed == ["aaaa", "bbbb"] and len(count_measurements) == 1  # ... and the table itself is not measured again
    assert json.loads(path.read_text())["costs"]["head_s"] == {"aaaa": 0.001, "bbbb": 0.002}
    cost_table.measure(tiny_pair, repeats=1, refresh=True)  # a table measured anew starts without heads
    assert cost_table.read_head_steps(path) == {} and cost_table.measure(tiny_pair, head=head).head_s == 0.003
    data = json.loads(path.read_text())
    del data["costs"]["head_first_s"]  # kept before the first draft was timed apart: not trusted
    path.write_text(json.dumps(data))
    monkeypatch.setattr(cost_table, "_head_steps", {})
    assert cost_table.read_head_steps(path) == {} and cost_table.measure(tiny_pair, head=head).head_first_s == 0.008


def test_a_table_carries_the_drafts_catch_ups_and_the_target_alone_has_none(tiny_pair, cache, monkeypatch):
    """A step's first draft pass (its catch-up over 1 to 16 tokens) is timed after the caches were
    emptied, each further one-token pass without: the table keeps both."""
    emptied = []
    real = passcost.CacheEmptier.__call__
    monkeypatch.setattr(passcost.CacheEmptier, "__call__", lambda self: emptied.append(1) or real(self))
    costs = cost_table.measure(tiny_pair, repeats=1)
    assert len(costs.draft_feed_s) == len(costs.sizes) and all(t > 0 for t in costs.draft_feed_s)
    assert len(emptied) == len(costs.sizes)  # before each first pass, and before no other pass
    assert costs.draft_pass_s(1) == max(costs.draft_feed_s[0], costs.draft_s)  # the first pass of a step: cold
    assert costs.draft_pass_s(0) == costs.draft_pass_s(1) and costs.draft_pass_s(16) >= costs.draft_s  # in order, never below one token
    target_only = cost_table.measure(tiny_pair, draft_variant=cost_table.NO_DRAFT, repeats=1)
    assert target_only.draft_s is None and target_only.draft_feed_s is None and target_only.draft_pass_s(4) is None


def test_a_variants_catch_ups_are_timed_once_and_kept_in_its_draft_file(tiny_pair, cache, monkeypatch):
    monkeypatch.setattr(cost_table, "_drafts", {})
    monkeypatch.setattr(cost_table, "_feeds", {})
    timed = []
    real = cost_table.time_draft_feeds
    monkeypatch.setattr(cost_table, "time_draft_feeds", lambda *a, **k: timed.append(1) or real(*a, **k))
    feeds = cost_table.draft_feeds(tiny_pair, "int8", repeats=1)
    path = cost_table.draft_path(tiny_pair.name, "int8", tiny_pair.dtype_name, tiny_pair.device)
    kept = cost_table.read_draft(path)  # the one-token passes: the first of a step (timed as one feed) and a further one
    assert cost_table.read_draft_feeds(path) == feeds and kept.first_s > 0 and kept.step_s > 0 and timed == [1, 1]
    monkeypatch.setattr(cost_table, "_feeds", {})  # a new process: the file is read, nothing timed
    assert cost_table.draft_feeds(tiny_pair, "int8") == feeds and timed == [1, 1]
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "draft_feed_s": [-1.0] * len(feeds)}))  # damaged: timed again
    monkeypatch.setattr(cost_table, "_feeds", {})
    assert cost_table.draft_feeds(tiny_pair, "int8", repeats=1) and timed == [1, 1, 1]
