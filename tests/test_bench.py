"""The benchmark runs end to end on tiny-random and reports what it promises (shape, parity)."""

import json

import pytest

from specdec.__main__ import main
from specdec.bench.runner import DEFAULT_MODES, bench, load_prompts
from specdec.bench.report import geomean, table

PROMPTS = [
    {"id": "code", "prompt": "def add(a, b):\n    return a + b\n\ndef add(a, b):", "chat": False, "kind": "ignored"},
    {"id": "loop", "prompt": "for i in range(10):", "chat": False},
]


@pytest.fixture(scope="module")
def report(tiny_pair):
    return bench(tiny_pair, PROMPTS, k=4, max_new_tokens=12, repeats=2, warmup_tokens=2, log=lambda line: None)


def test_cli_prints_one_json_object(tmp_path, capsys):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(PROMPTS[:1]))
    argv = ["bench", "--pair", "tiny-random", "--dtype", "fp32", "--prompts", str(path), "--max-new-tokens", "4", "--json",
            "--no-lock"]  # its timings do not matter: it must not wait for a measurement running on this machine
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [r["mode"] for r in out["results"]] == list(DEFAULT_MODES)
    assert "plain" in captured.err  # progress goes to stderr, one line per run


def test_json_shape(report):
    assert {"results", "summary", "machine", "settings"} <= report.keys()
    assert len(report["results"]) == len(PROMPTS) * len(DEFAULT_MODES)
    keys = {"prompt", "mode", "tokens", "seconds", "tok_s", "identical_to_plain", "accepted_share"}
    for r in report["results"]:
        assert keys <= r.keys()
        assert r["tokens"] > 0 and r["seconds"] > 0 and r["tok_s"] == pytest.approx(r["tokens"] / r["seconds"])
        assert len(r["runs_s"]) == 2  # one per round
    s = report["summary"]
    assert set(s["speedup_vs_plain"]) == set(DEFAULT_MODES) - {"plain"}
    assert all(v > 0 for v in s["speedup_vs_plain"].values())
    assert s["ratio_vs_hf_assisted"] > 0
    assert {"c", "measured_over_textbook", "measured_over_with_costs", "measured_over_from_passes", "per_prompt"} <= s["leviathan"].keys()
    assert {"cpu", "cpu_flags", "cores", "torch", "dtype", "device"} <= report["machine"].keys()
    assert set(s["cost_ratio_c"]) == {"spec", "best"} and all(c > 0 for c in s["cost_ratio_c"].values())
    assert set(s["draft_memory_gb"]) == {"spec", "best", "hf_assisted"} and all(g > 0 for g in s["draft_memory_gb"].values())
    assert {r["draft_variant"] for r in report["results"] if r["mode"] in ("spec", "best")} == set(report["settings"]["draft_variants"])


def test_our_greedy_modes_equal_plain(report):
    by = {(r["prompt"], r["mode"]): r for r in report["results"]}
    for p in PROMPTS:
        plain = by[p["id"], "plain"]
        assert plain["identical_to_plain"] is None
        for mode in ("spec", "best"):
            assert by[p["id"], mode]["identical_to_plain"] is True, (p["id"], mode)
            assert by[p["id"], mode]["tokens"] == plain["tokens"]
        assert 0 <= by[p["id"], "spec"]["accepted_share"] <= 1
        # transformers stops on the same end-of-sequence ids and length, so it makes as many tokens
        assert by[p["id"], "hf_assisted"]["tokens"] == plain["tokens"]


def test_rows_carry_acceptance_by_position(report):
    rows = {(r["prompt"], r["mode"]): r for r in report["results"]}
    for p in PROMPTS:
        for mode in ("plain", "hf_assisted"):  # nothing drafted, or no steps known
            assert rows[p["id"], mode]["acceptance_by_position"] is None
        spec = rows[p["id"], "spec"]
        rates, tested = spec["acceptance_by_position"], spec["tested_by_position"]
        assert 1 <= len(rates) == len(tested) <= 4  # K = 4
        assert tested == sorted(tested, reverse=True) and tested[0] > 0  # a deeper position is judged no more often
        assert all(r is None or 0 <= r <= 1 for r in rates)
    pooled = report["summary"]["acceptance_by_position"]
    assert {"spec", "best"} <= pooled.keys() and "plain" not in pooled
    per_prompt = [rows[p["id"], "spec"]["tested_by_position"] for p in PROMPTS]
    assert pooled["spec"]["tested"] == [sum(t[i] for t in per_prompt if i < len(t)) for i in range(len(pooled["spec"]["tested"]))]
    assert "acceptance by draft position 1..K" in table(report)


def test_bad_prompt_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"id": "x"}]))
    with pytest.raises(ValueError, match="prompt"):
        load_prompts(str(path))


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None


def test_variants_side_by_side_and_the_lossy_lane(tiny_pair):
    report = bench(tiny_pair, PROMPTS[:1], modes=["plain", "spec", "plain_int4"], variants=["dense", "int4-v16k"],
                   k=4, max_new_tokens=12, warmup_tokens=2, log=lambda line: None)
    by = {r["mode"]: r for r in report["results"]}
    assert list(by) == ["plain", "spec@dense", "spec@int4-v16k", "plain_int4"]
    assert by["spec@dense"]["identical_to_plain"] and by["spec@int4-v16k"]["identical_to_plain"]  # a cheaper draft changes nothing
    assert by["spec@int4-v16k"]["draft_variant"] == "int4-v16k"
    s = report["summary"]
    assert s["draft_memory_gb"]["spec@int4-v16k"] < s["draft_memory_gb"]["spec@dense"]
    lossy = by["plain_int4"]
    assert 0 <= lossy["agree_first_64"] <= lossy["tokens"]
    if lossy["identical_to_plain"]:
        assert lossy["first_difference"] is None
    else:  # the quantized target wrote something else: where, and which two tokens
        d = lossy["first_difference"]
        assert d["lossy_token"] != d["exact_token"] and lossy["agree_first_64"] >= d["index"]
    assert s["target_memory_gb"]["plain_int4"] < s["target_memory_gb"]["plain"]
    text = table(report)
    assert "spec@int4-v16k" in text and "CPU flags" in text and "draft resident memory" in text
    if not lossy["identical_to_plain"]:
        assert f"departs at {lossy['first_difference']['index']}" in text


def test_bad_mode_and_variant_names(tiny_pair):
    with pytest.raises(ValueError, match="unknown mode"):
        bench(tiny_pair, PROMPTS[:1], modes=["plain", "fast"], max_new_tokens=2, log=lambda line: None)
    with pytest.raises(ValueError, match="draft_variant must be one of"):
        bench(tiny_pair, PROMPTS[:1], modes=["spec"], variants=["int3"], max_new_tokens=2, log=lambda line: None)


def test_runners_side_by_side(tmp_path, capsys):
    """`bench --runner eager,static` runs our modes once per runner, each against plain decoding on
    its own runner; every row names its runner, transformers' rows none."""
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(PROMPTS[:1]))
    argv = ["bench", "--pair", "tiny-random", "--dtype", "fp32", "--prompts", str(path), "--max-new-tokens", "6",
            "--modes", "plain,spec,hf_assisted", "--json", "--no-lock"]
    assert main(argv + ["--runner", "eager,static"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = [(r["mode"], r["runner"]) for r in out["results"]]
    assert rows == [("plain", "eager"), ("spec", "eager"), ("hf_assisted", None), ("plain", "static"), ("spec", "static")]
    assert all(r["identical_to_plain"] in (None, True) for r in out["results"])
    assert set(out["summary"]["by_lane"]) == {"dense eager", "dense static"} and out["settings"]["runners"] == ["eager", "static"]
    assert "[static]" in table(out)
    assert main(argv + ["--runner", "static,warp"]) == 2 and "runner must be one of" in capsys.readouterr().err


def test_the_page_mode_runs_what_the_page_starts_on(tiny_pair, monkeypatch):
    """`page` runs start_defaults' drafter, draft variant and K policy on the lane's kernel and runner,
    and says in the settings what the page starts on."""
    from specdec.bench import runner
    from specdec.kernels.machine_defaults import MachineDefaults

    start = MachineDefaults("w8a8", "int4-v16k", "model", "static", "adaptive", "a start for this test")
    monkeypatch.setattr(runner, "start_defaults", lambda name, device: start)
    configs, run_ours = [], runner.run_ours
    monkeypatch.setattr(runner, "run_ours", lambda pair, ids, config: configs.append(config) or run_ours(pair, ids, config))
    report = bench(tiny_pair, PROMPTS[:1], modes=["plain", "page"], variants=["dense"], k=3, max_new_tokens=8,
                   warmup_tokens=2, log=lambda line: None)
    page = [c for c in configs if c.drafter != "none"]
    assert page and {(c.drafter, c.draft_variant, c.k_policy, c.target_kernel, c.runner) for c in page} == {
        ("model", "int4-v16k", "adaptive", "dense", "eager")}
    by = {r["mode"]: r for r in report["results"]}
    assert by["page"]["identical_to_plain"] and by["page"]["accepted_share"] is not None
    assert report["settings"]["page"] == start.line


def test_the_page_mode_needs_the_start():
    from specdec.bench.policies import mode_config

    with pytest.raises(ValueError, match="start_defaults"):
        mode_config("page", 3, 8, "constant")
