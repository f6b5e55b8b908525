"""A departure of speculative from plain output is judged by the kernel that ran: its own top-2 logit
margin at the departure and its own tie bound (specdec.measure.compare.tie_bound); a batch-invariant
kernel has none, so any departure there is a fault. Hand-made logits per kernel."""

import html
from dataclasses import replace

import pytest
import torch

from app.render import render_badge
from specdec.bench.report import exactness, exactness_lines
from specdec.bench.runner import Result
from specdec.core.events import PLAIN, StepEvent
from specdec.kernels import w8a8_build
from specdec.measure.compare import TIE_MARGIN, first_difference, tie_bound, tie_verdict

pytestmark = pytest.mark.skipif(not w8a8_build.available()[0], reason="the batch-invariant kernels need the kernel library")


def margin_of(logits: torch.Tensor) -> float:
    """The engine's margin (specdec/core/runners/reading.py): top-1 minus top-2 of the logits as computed."""
    top2 = logits.float().topk(2).values
    return float(top2[0] - top2[1])


def runs_parting_at(logits: torch.Tensor) -> tuple[list[StepEvent], list[StepEvent]]:
    """A speculative and a plain run of three tokens that agree on the first and part on the second,
    where the kernel's logits were `logits` (the same margin in both runs)."""
    margin = margin_of(logits)

    def run(second: int) -> list[StepEvent]:
        return [StepEvent(step=i, drafted=(), accepted=0, emitted=(t,), kind=PLAIN, p_target=(), p_draft=(), draft_s=0.0,
                          verify_s=0.01, total_tokens=i + 1, elapsed_s=0.01 * (i + 1), emitted_text=(f"t{t}",), drafted_text=(),
                          margins=(m,)) for i, (t, m) in enumerate([(1, 9.0), (second, margin), (3, 9.0)])]
    return run(7), run(8)


def logits(top: float, second: float, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor([top - 5.0, top, second, 0.5]).to(dtype)  # (V,) over a 4-token vocabulary


@pytest.mark.parametrize("kernel, dtype, device, top, second, tie", [
    ("dense", torch.bfloat16, "cpu", 20.0, 19.625, True),  # three bf16 steps of 0.125 apart: rounding can swap them
    ("dense", torch.bfloat16, "cpu", 20.0, 19.375, False),  # five steps
    ("dense", torch.float32, "cuda", 20.0, 19.9995, True),  # fp32 off a CPU: within 1e-3
    ("dense", torch.float32, "cuda", 20.0, 19.99, False),
    ("dense", torch.float32, "cpu", 20.0, 19.99999, False),  # fp32 on a CPU: batch-invariant
    ("int8", torch.float32, "cuda", 20.0, 19.625, True),  # bf16 activations whatever the pair's dtype: bf16's bound
    ("int8", torch.float32, "cpu", 20.0, 19.625, False),  # on a CPU: batch-invariant
    ("q4k", torch.float32, "cpu", 20.0, 19.625, True),  # not batch-invariant: bf16's bound
    ("q4k", torch.float32, "cpu", 20.0, 19.375, False),
    ("w8a8", torch.bfloat16, "cpu", 20.0, 20.0, False),  # batch-invariant: even equal top-2 logits are no excuse
    ("w8a8", torch.float32, "cpu", 20.0, 19.99999, False),
])
def test_a_departure_is_a_tie_only_within_the_kernels_own_bound(kernel, dtype, device, top, second, tie):
    pair_dtype = "bf16" if dtype == torch.bfloat16 else "fp32"
    spec, plain = runs_parting_at(logits(top, second, dtype))
    d = first_difference(spec, plain, pair_dtype, kernel, device)
    assert (d.index, d.kernel, d.margin) == (1, kernel, pytest.approx(top - second, abs=1e-6))
    assert d.is_tie is tie and d.bound == tie_bound(kernel, pair_dtype, device)
    invariant = device == "cpu" and (kernel in ("w8a8", "int8") or (kernel, pair_dtype) == ("dense", "fp32"))
    assert (d.bound is None) is invariant
    verdict = tie_verdict(d)
    assert f"{kernel} kernel's top-2 logit margin" in verdict
    assert ("a numerical tie" in verdict) is tie and ("NOT a tie" in verdict) is (not tie)
    assert ("batch-invariant" in verdict) is invariant
    assert html.escape(verdict) in render_badge(identical=False, index=1, spec_text="t7", plain_text="t8", verdict=verdict)


def test_the_bounds_follow_the_kernels_rounding():
    assert tie_bound("dense", "fp32", "cuda") == TIE_MARGIN["fp32"] and tie_bound("dense", "bf16") == TIE_MARGIN["bf16"]
    assert tie_bound("int8", "fp32", "cuda") == tie_bound("q4k", "fp32") == TIE_MARGIN["bf16"]
    assert tie_bound("w8a8", "fp32") is tie_bound("w8a8", "bf16") is tie_bound("dense", "fp32") is tie_bound("int8", "bf16") is None
    assert tie_bound(None, "fp32") == TIE_MARGIN["fp32"]  # an unknown kernel (a real engine's): its dtype's
    unknown = first_difference(*runs_parting_at(logits(20.0, 19.5, torch.bfloat16)), "bf16")
    assert unknown.kernel is None and unknown.is_tie and "the target's top-2 logit margin" in tie_verdict(unknown)


def bench_row(kernel: str, identical: bool, is_tie: bool | None = None, mode: str = "best") -> Result:
    d = None if identical else {"index": 5, "margin": 0.0, "is_tie": is_tie, "kernel": kernel, "bound": tie_bound(kernel, "bf16")}
    return Result(prompt="p", mode=mode, tokens=64, seconds=1.0, tok_s=64.0, identical_to_plain=identical, accepted_share=0.7,
                  target_passes=20, mean_k=5.0, runs_s=[1.0], first_difference=d, target_kernel=kernel)


def test_the_bench_says_per_kernel_whether_speculation_kept_plains_output():
    plain = replace(bench_row("w8a8", True), mode="plain", identical_to_plain=None)
    invariant = exactness([plain, bench_row("w8a8", True), bench_row("w8a8", False, is_tie=False)], "w8a8", "bf16")
    assert invariant == {"kernel": "w8a8", "batch_invariant": True, "tie_bound": None, "runs": 2, "departures": 1, "ties": 0, "met": False}
    assert exactness([bench_row("w8a8", True), bench_row("w8a8", True, mode="spec")], "w8a8", "bf16")["met"]
    dense = exactness([bench_row("dense", False, is_tie=True), bench_row("dense", True)], "dense", "bf16")
    assert dense["met"] and dense["ties"] == 1 and not dense["batch_invariant"]
    assert not exactness([bench_row("dense", False, is_tie=False)], "dense", "bf16")["met"]
    lines = exactness_lines({"by_kernel": {"dense": {"exactness": dense}, "w8a8": {"exactness": invariant}}})
    assert lines[0].startswith("exact on dense: not batch-invariant") and lines[0].endswith("(1 at a tie): met")
    assert "must equal plain output bit for bit" in lines[1] and lines[1].endswith("NOT MET")
