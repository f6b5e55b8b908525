import json

from specdec.__main__ import main


def test_generate_json_with_compare(capsys):
    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "for i in range(10):",
            "--k", "4", "--max-new-tokens", "20", "--compare", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"pair", "device", "dtype", "draft_variant", "text", "tokens", "steps", "metrics", "plain", "speedup", "identical_to_plain"} <= out.keys()
    assert {"accepted_share", "tokens_per_pass", "target_passes", "tokens_per_s", "cost_ratio_c", "predicted_speedup"} <= out["metrics"].keys()
    assert out["identical_to_plain"] is True and out["tokens"] == out["plain"]["tokens"]
    assert len(out["tokens"]) == 20 and out["metrics"]["target_passes"] == len(out["steps"])
    assert all({"drafted", "accepted", "emitted", "kind"} <= s.keys() for s in out["steps"])


def test_generate_prints_ansi_colours(capsys):
    assert main(["generate", "--pair", "tiny-random", "--prompt", "def f(x):", "--max-new-tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "\033[32m" in out and "acceptance" in out


def test_generate_with_a_variant_and_the_lossy_lane(capsys):
    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "for i in range(10):",
            "--max-new-tokens", "12", "--draft-variant", "int8", "--plain-int4", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["draft_variant"] == "int8" and out["identical_to_plain"] is True
    assert 0 < out["draft_memory_gb"] < 0.01  # tiny-random
    lossy = out["plain_int4"]
    assert len(lossy["tokens"]) == 12 and 0 <= lossy["agree_first_64"] <= 12
    assert lossy["identical_to_target"] == (lossy["first_difference"] is None)


def test_status_line_names_the_variant(capsys):
    assert main(["generate", "--pair", "tiny-random", "--prompt", "def f(x):", "--max-new-tokens", "8", "--draft-variant", "int4-v32k"]) == 0
    assert "draft int4-v32k" in capsys.readouterr().out


def test_generate_on_the_static_runner_names_it(capsys):
    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "for i in range(10):",
            "--k", "4", "--max-new-tokens", "16", "--compare", "--runner", "static"]
    assert main(argv) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert "static runner" in line and "identical to plain" in line
    assert main(argv[:-1] + ["compiled,static"]) == 2 and "one runner" in capsys.readouterr().err
    assert main(argv[:-1] + ["turbo"]) == 2 and "runner must be one of eager, static, compiled" in capsys.readouterr().err


def test_bad_variant_exits_2(capsys):
    assert main(["generate", "--pair", "tiny-random", "--prompt", "x", "--draft-variant", "int2"]) == 2
    assert "draft_variant must be one of" in capsys.readouterr().err


def test_generate_writes_a_run_record_the_app_can_load(capsys, tmp_path):
    from specdec.record.run_file import from_json

    path = tmp_path / "run.json"
    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "def f(x):", "--max-new-tokens", "16",
            "--compare", "--json", "--record", str(path)]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    record = from_json(path.read_text(encoding="utf-8"))
    assert [t for e in record.spec for t in e.emitted] == out["tokens"]
    assert [t for e in record.plain for t in e.emitted] == out["plain"]["tokens"]
    assert record.prompt == "def f(x):" and record.pair["dtype"] == "fp32"


def test_generate_with_the_cost_policy_measures_the_cost_table_once_with_a_progress_bar(capsys, tmp_path, monkeypatch):
    from specdec.measure import cost_table

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(cost_table, "_tables", {})
    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "for i in range(10):",
            "--k-policy", "cost", "--max-new-tokens", "20", "--compare", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "pass costs of tiny-random" in captured.err and json.loads(captured.out)["identical_to_plain"] is True
    assert main(argv) == 0
    assert "pass costs" not in capsys.readouterr().err  # cached: not measured again
