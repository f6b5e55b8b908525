import json

from specdec.__main__ import main


def test_generate_json_with_compare(capsys):
    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "for i in range(10):",
            "--k", "4", "--max-new-tokens", "20", "--compare", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"pair", "device", "dtype", "text", "tokens", "steps", "metrics", "plain", "speedup", "identical_to_plain"} <= out.keys()
    assert {"acceptance_rate", "tokens_per_step", "target_passes", "tokens_per_s", "cost_ratio_c", "predicted_speedup"} <= out["metrics"].keys()
    assert out["identical_to_plain"] is True and out["tokens"] == out["plain"]["tokens"]
    assert len(out["tokens"]) == 20 and out["metrics"]["target_passes"] == len(out["steps"])
    assert all({"drafted", "accepted", "emitted", "kind"} <= s.keys() for s in out["steps"])


def test_generate_prints_ansi_colours(capsys):
    assert main(["generate", "--pair", "tiny-random", "--prompt", "def f(x):", "--max-new-tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "\033[32m" in out and "acceptance" in out
