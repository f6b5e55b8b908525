"""The benchmark runs end to end on tiny-random and reports what it promises (shape, parity)."""

import json

import pytest

from specdec.__main__ import main
from specdec.bench import DEFAULT_MODES, bench, geomean, load_prompts

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
    argv = ["bench", "--pair", "tiny-random", "--dtype", "fp32", "--prompts", str(path), "--max-new-tokens", "4", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [r["mode"] for r in out["results"]] == list(DEFAULT_MODES)
    assert "plain" in captured.err  # progress goes to stderr, one line per run


def test_json_shape(report):
    assert {"results", "summary", "machine", "settings"} <= report.keys()
    assert len(report["results"]) == len(PROMPTS) * len(DEFAULT_MODES)
    keys = {"prompt", "mode", "tokens", "seconds", "tok_s", "identical_to_plain", "acceptance_rate"}
    for r in report["results"]:
        assert keys <= r.keys()
        assert r["tokens"] > 0 and r["seconds"] > 0 and r["tok_s"] == pytest.approx(r["tokens"] / r["seconds"])
        assert len(r["runs_s"]) == 2  # one per round
    s = report["summary"]
    assert set(s["speedup_vs_plain"]) == set(DEFAULT_MODES) - {"plain"}
    assert all(v > 0 for v in s["speedup_vs_plain"].values())
    assert s["ratio_vs_hf_assisted"] > 0
    assert {"c", "measured_over_textbook", "measured_over_with_costs", "measured_over_from_passes", "per_prompt"} <= s["leviathan"].keys()
    assert {"cpu", "cores", "torch", "dtype", "device"} <= report["machine"].keys()


def test_our_greedy_modes_equal_plain(report):
    by = {(r["prompt"], r["mode"]): r for r in report["results"]}
    for p in PROMPTS:
        plain = by[p["id"], "plain"]
        assert plain["identical_to_plain"] is None
        for mode in ("spec", "best"):
            assert by[p["id"], mode]["identical_to_plain"] is True, (p["id"], mode)
            assert by[p["id"], mode]["tokens"] == plain["tokens"]
        assert 0 <= by[p["id"], "spec"]["acceptance_rate"] <= 1
        # transformers stops on the same end-of-sequence ids and length, so it makes as many tokens
        assert by[p["id"], "hf_assisted"]["tokens"] == plain["tokens"]


def test_bad_prompt_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"id": "x"}]))
    with pytest.raises(ValueError, match="prompt"):
        load_prompts(str(path))


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None
