"""`python -m specdec bench --predictions`: the measured speedup beside the three predictions, per
prompt, and the verdict on the accounting (specdec.bench.predictions)."""

import json
from dataclasses import replace
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
    (["--draft-variant", "dense,int4"], "--draft-variant takes one name here"),
    (["--runner", "eager,static"], "--runner takes one name here"),
])
def test_predictions_take_one_configuration(capsys, prompts_file, change, message):
    argv = ["bench", "--pair", "tiny-random", "--dtype", "fp32", "--prompts", prompts_file, "--predictions", "--no-lock"]
    assert main(argv + change) == 2
    assert message in capsys.readouterr().err


# Hand-made runs of the other drafters: what each step cost, as the engine's events report it.
STEP = 0.068  # a w8a8 decode step on the AMD AVX-512 machine


def event(step: int, drafted: int, accepted: int, draft_s: float, verify_s: float, drafter: str, total: int, elapsed: float):
    from specdec.core.events import StepEvent

    n = accepted + 1
    return StepEvent(step=step, drafted=tuple(range(drafted)), accepted=accepted, emitted=tuple(range(n)),
                     kind="correction" if accepted < drafted else ("bonus" if drafted else "plain"),
                     p_target=(0.5,) * drafted, p_draft=(1.0,) * drafted, draft_s=draft_s, verify_s=verify_s,
                     total_tokens=total, elapsed_s=elapsed, emitted_text=("x",) * n, drafted_text=("x",) * drafted,
                     margins=(1.0,) * n, k=drafted, drafter=drafter if drafted else "")


def hand_made_run(drafter: str, draft_step_s: float, pattern: list[tuple[int, int]]):
    """Steps of (drafted, accepted), each step's draft time K x draft_step_s and a check of K+1 tokens at
    1.03 decode steps; and plain decoding of as many tokens."""
    spec, total, elapsed = [], 0, 0.0
    for i, (drafted, accepted) in enumerate(pattern):
        draft_s, verify_s = drafted * draft_step_s, STEP * (1.0 + 0.03 * drafted / 3)
        total, elapsed = total + accepted + 1, elapsed + draft_s + verify_s
        spec.append(event(i, drafted, accepted, draft_s, verify_s, drafter, total, elapsed))
    plain = [event(i, 0, 0, 0.0, STEP, "", i + 1, STEP * (i + 1)) for i in range(total)]
    return spec, plain


@pytest.mark.parametrize("drafter, draft_step_s, priced", [("lookup", 0.00002, 0.0), ("head", 0.0041, 0.0041 / STEP)])
def test_the_accounting_explains_the_head_and_lookup_and_shows_the_priced_c(drafter, draft_step_s, priced):
    from specdec.measure.metrics import measured_speedup, summarize, summarize_runs
    from specdec.core.theory import prediction_gap

    spec_events, plain_events = hand_made_run(drafter, draft_step_s, [(3, 3), (3, 0), (2, 1), (3, 2), (1, 1), (3, 3)])
    spec = summarize_runs(spec_events, plain_events)
    gap = prediction_gap(measured_speedup(spec, summarize(plain_events)), spec)
    costs = SimpleNamespace(draft_s=0.03, head_s=0.0041, head_first_s=None, decode_step_s=STEP)
    row = predictions.PromptPrediction("p", spec, gap, *predictions.bursts(spec_events, spec.alpha), same_as_plain=True,
                                       priced_c=predictions.priced_c(spec_events, costs))
    assert row.priced_c == pytest.approx(priced)
    assert spec.cost_ratio_c == pytest.approx(draft_step_s / STEP, rel=1e-6)  # the run's own c: what it measured
    assert predictions.within_tolerance([row])  # the accounting explains the measurement for this drafter too
    assert f"| {spec.cost_ratio_c:.3f} ({priced:.3f}) |" in predictions.table([row])
    assert predictions.as_json([row])["prompts"][0]["priced_c"] == pytest.approx(priced)


def test_the_priced_c_per_drafter_counts_the_draft_models_catch_up():
    """Lookup drafts for free, the head at its first draft of a step and each further one; the draft
    model's first pass of a step is priced at 1 plus the tokens of the steps it did not draft: 1
    after its own steps, 5 after a lookup step of 3 tokens and a plain step."""
    from specdec.measure.passcost import PassCosts

    costs = PassCosts((1, 2, 4, 8), (0.068, 0.07, 0.072, 0.08), 0.0388, 200, 3, head_s=0.0041,
                      draft_feed_s=(0.0388, 0.045, 0.06, 0.09))
    steps = [("model", 2, 2), ("model", 2, 0), ("lookup", 2, 2), ("", 0, 0), ("model", 1, 1)]
    events = [event(i, d, a, 0.0, STEP, who, 0, 0.0) for i, (who, d, a) in enumerate(steps)]
    assert predictions.catch_ups(events) == {0: 1, 1: 1, 4: 1 + 3 + 1}
    model_s = (0.0388 + 0.0388) + (0.0388 + 0.0388) + (0.06 + (0.09 - 0.06) / 4)  # first passes priced at 1, 1 and 5 tokens
    assert predictions.priced_c(events, costs) == pytest.approx(model_s / 7 / 0.068)
    head = [event(0, 3, 1, 0.0, STEP, "head", 0, 0.0), event(1, 2, 2, 0.0, STEP, "lookup", 0, 0.0)]
    assert predictions.priced_c(head, costs) == pytest.approx(3 * 0.0041 / 5 / 0.068)
    cold = replace(costs, head_first_s=0.009)  # the first draft of a step, after the target's pass
    assert predictions.priced_c(head, cold) == pytest.approx((0.009 + 2 * 0.0041) / 5 / 0.068)
    assert predictions.priced_c(head, replace(costs, head_s=None)) is None  # the table lacks the head's step
    assert predictions.priced_c([event(0, 0, 0, 0.0, STEP, "", 0, 0.0)], costs) is None  # nothing drafted


def test_bench_predictions_with_prompt_lookup_on_tiny_random(capsys, prompts_file):
    argv = ["bench", "--pair", "tiny-random", "--dtype", "fp32", "--prompts", prompts_file, "--predictions", "--drafter", "lookup",
            "--k", "4", "--max-new-tokens", "16", "--no-lock", "--json"]
    status = main(argv)
    out = json.loads(capsys.readouterr().out)
    assert status == (0 if out["within_tolerance"] else 1)
    assert all(p["priced_c"] == 0.0 and p["same_as_plain"] for p in out["prompts"])
    assert main(["bench", "--pair", "tiny-random", "--drafter", "lookup", "--no-lock"]) == 2
    assert "--drafter lookup is for --predictions" in capsys.readouterr().err
