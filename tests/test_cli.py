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


def test_the_old_name_bf16_is_read_as_dense(capsys, tmp_path):
    """`bf16` was the name of the target as loaded and of the draft's own weights: still accepted, run as `dense`."""
    import argparse

    from specdec.cli.args import kernel_names

    assert kernel_names(argparse.Namespace(target_kernel="bf16,int8,dense")) == ["dense", "int8"]
    path = tmp_path / "run.json"
    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "def f(x):", "--max-new-tokens", "8",
            "--target-kernel", "bf16", "--draft-variant", "bf16-v16k", "--json", "--record", str(path)]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["draft_variant"] == "dense-v16k"
    settings = json.loads(path.read_text(encoding="utf-8"))["settings"]
    assert (settings["target_kernel"], settings["draft_variant"]) == ("dense", "dense-v16k")


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


CHECK = ["check", "--pair", "tiny-random", "--dtype", "fp32", "--target-kernel", "dense", "--prefix", "8", "--sizes", "2,3"]


def test_check_prints_a_verdict_for_every_op_of_the_pass(capsys):
    from specdec.kernels.batch_invariant import invariant_kernel
    from specdec.measure.row_invariance import LAYER_OPS

    assert main(CHECK + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    ops = ["embedding", "rotary cos/sin", *(op for op, _, _ in LAYER_OPS), "final norm", "lm_head"]
    assert [v["op"] for v in result["ops"]] == ops
    assert [(c["runner"], c["rows"]) for c in result["checks"]] == [("eager", 2), ("eager", 3), ("static", 2), ("static", 3)]
    if invariant_kernel("dense", "fp32"):  # the dense fp32 target is made batch-invariant where the kernel library runs
        assert all(v["verdict"] == "row-invariant" and v["judged"] > 0 for v in result["ops"])
        assert all(c["logits_max_diff"] == 0 and c["first_difference"] is None for c in result["checks"])

    assert main(CHECK) == 0
    text = capsys.readouterr().out
    verdicts = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1] for line in text.splitlines()
                if line.startswith("| ") and line.split(" | ")[0].removeprefix("| ") in ops}
    assert verdicts == {v["op"]: v["verdict"] for v in result["ops"]}
    assert "| static | 3 | " in text


def test_check_bad_input_exits_2_naming_it(capsys):
    assert main(CHECK + ["--runner", "compiled"]) == 2
    assert "runner must be eager or static" in capsys.readouterr().err
    assert main(CHECK + ["--sizes", "0"]) == 2
    assert "sizes must be positive integers" in capsys.readouterr().err
    assert main(CHECK + ["--target-kernel", "bf16,int8"]) == 2
    assert "check runs one target kernel" in capsys.readouterr().err
    assert main(CHECK + ["--target-kernel", "fp8"]) == 2
    assert "fp8" in capsys.readouterr().err


def test_checks_verdicts_judge_an_op_only_on_equal_inputs():
    import torch

    from specdec.measure.row_invariance import compare

    one, other = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])
    ops = [("norm", "L0", ("in",), "n"), ("proj", "L0", ("n",), "p"), ("add", "L0", ("p",), "out")]
    alone = [{"in": one, "n": one, "p": one, "out": one}, {"in": one, "n": one, "p": one, "out": one}]
    check = [{"in": one, "n": one, "p": one, "out": one}, {"in": one, "n": one, "p": other, "out": other}]
    first, results = compare(check, alone, ops)
    assert first == "proj L0 (row 1, max abs diff 0.5)"
    assert (results["norm"].judged, results["norm"].differed) == (2, [])
    assert (results["proj"].judged, results["proj"].differed) == (2, [("L0", 1, 0.5)])  # equal inputs, other bits
    assert (results["add"].judged, results["add"].differed) == (1, [])  # row 1's input differed already: not judged there
