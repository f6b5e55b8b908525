"""The Theory tab's Measure pass costs on tiny-random: a cost table per target kernel, kept for
every session, drawn as one curve per kernel."""

from __future__ import annotations


from app import theory, theory_run
from app.page import StopFlag
from specdec.serving import gpu_budget
from specdec.serving import pairs
from specdec.serving.pairs import Offer, PairStore
from specdec.kernels import device_offer


def test_measure_pass_costs_gives_one_table_and_one_curve_per_kernel(page, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))  # the tables measured here stay here
    monkeypatch.setattr(pairs, "_shared", PairStore(Offer("tiny-random", ("tiny-random",)), device="cpu", dtype="fp32"))
    monkeypatch.setattr(gpu_budget, "_costs", {})
    monkeypatch.setattr(theory, "KERNEL_COSTS", {})
    monkeypatch.setattr(theory, "PASS_COSTS", {})
    values = {page.pair: "tiny-random", page.prompt: "def f(x):", page.draft_variant: "dense",
              page.theory_state: theory.TheorySession(), page.stop: StopFlag()}
    out = theory_run.measure_passes(page, values, lambda *a, **k: None)
    KERNELS = device_offer.target_kernels(None).names  # w8a8 where this machine runs its kernel
    assert list(theory.KERNEL_COSTS[("tiny-random", "fp32")]) == list(KERNELS)
    for table in theory.KERNEL_COSTS[("tiny-random", "fp32")].values():
        assert table.sizes == (1, 2, 3, 4, 6, 8, 12, 16) and all(t > 0 for t in table.target_s) and table.draft_s > 0
    assert [t.name for t in out[page.passcost_plot].data] == list(KERNELS)
    assert "Pass costs measured" in out[page.theory_status] and "q4k" in out[page.theory_status]
    assert "**int8**: decode step" in out[page.passcost_caption]
