"""`python -m specdec bench --predictions`: the measured speedup beside the three predictions, per
prompt, and the verdict on the accounting (specdec.bench.predictions)."""

import json
from types import SimpleNamespace

import pytest

from specdec.__main__ import main
from specdec.bench import predictions
from specdec.core.theory import PredictionGap

PROMPTS = [
    {"id": "code", "prompt": "def add(a, b):\n    return a + b\n\ndef add(a, b):", "chat": False},
    {"id": "loop", "prompt": "for i in range(10):", "chat": False},
]


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(PROMPTS))
    return str(path)


def test_bench_predictions_on_tiny_random(capsys, prompts_file):
    argv = ["bench", "--pair", "tiny-random", "--dtype", "fp32", "--prompts", prompts_file, "--predictions",
            "--k", "4", "--max-new-tokens", "16", "--no-lock"]
    status = main(argv + ["--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == (0 if out["within_tolerance"] else 1)
    assert [p["prompt"] for p in out["prompts"]] == ["code", "loop"]
    for p in out["prompts"]:
        assert p["same_as_plain"] is True  # greedy in fp32: the target's own tokens
        assert 0 <= p["alpha"] <= 1 and 1 <= p["tokens_per_pass"] <= 5 and p["cost_ratio_c"] > 0
        assert p["measured"] > 0 and p["textbook"] > 0 and p["with_verify_cost"] > 0 and p["from_passes"] > 0
    assert out["largest_gap"] == max(abs(p["measured"] / p["from_passes"] - 1) for p in out["prompts"])
    status = main(argv)
    text = capsys.readouterr().out
    assert "| code |" in text and "| loop |" in text and "accounting within 10% of the measured speedup" in text
    assert ("yes" if status == 0 else "NO") in text.splitlines()[-1]


def row(measured: float, from_passes: float) -> predictions.PromptPrediction:
    metrics = SimpleNamespace(alpha=0.9, accepted_share=0.8, tokens_per_pass=4.5, expected_tokens_per_pass=4.4,
                              cost_ratio_c=0.15, verify_cost=1.02)
    gap = PredictionGap(measured=measured, textbook=2.5, with_verify_cost=2.4, from_passes=from_passes, verify_factor=0.96,
                        burst_factor=1.02, unexplained=measured / from_passes)
    return predictions.PromptPrediction("p", metrics, gap, 1, 9, 1.3, 9.0, same_as_plain=True)


def test_the_verdict_turns_when_the_accounting_misses_by_more_than_the_tolerance():
    close, far = row(2.6, 2.58), row(2.6, 2.0)
    assert predictions.within_tolerance([close]) and not predictions.within_tolerance([close, far])
    assert predictions.largest_gap([close, far]) == pytest.approx(0.3)
    assert predictions.table([close]).endswith("on every prompt: yes (largest gap 0.8%)")
    assert predictions.table([close, far]).endswith("on every prompt: NO (largest gap 30.0%)")
    assert "| p | 0.90 | 80% | 4.50 (4.40) | 1 / 9 (1.3 / 9.0) | 0.150 | 1.02 | 2.60 | 2.50 (1.04) | 2.40 (1.08) | 2.00 (1.30) | yes |" \
        in predictions.table([far])


@pytest.mark.parametrize("change, message", [
    (["--modes", "plain,spec"], "--predictions runs spec against plain decoding: leave out --modes"),
    (["--draft-variant", "bf16,int4"], "--draft-variant takes one name here"),
    (["--runner", "eager,static"], "--runner takes one name here"),
])
def test_predictions_take_one_configuration(capsys, prompts_file, change, message):
    argv = ["bench", "--pair", "tiny-random", "--dtype", "fp32", "--prompts", prompts_file, "--predictions", "--no-lock"]
    assert main(argv + change) == 2
    assert message in capsys.readouterr().err
