"""`python -m specdec passes` and what it stands on: the one timing loop (passcost.time_rounds),
the products replaced by zeros (passcost.no_products), and the machine's measurement lock."""

import io
import json
import os
import re
import statistics
import threading
import time
from contextlib import contextmanager

import pytest
import torch

from specdec.__main__ import main
from specdec.cli.passes_table import tables
from specdec.measure.lock import one_measurement
from specdec.measure.passcost import Lane, no_products, time_rounds


class Recorder:
    """A model that records its passes and crops instead of computing."""

    device = torch.device("cpu")

    def __init__(self, name: str, log: list, length: int = 10):
        self.name, self.log, self.length = name, log, length

    def forward(self, ids, last_only):
        self.log.append((self.name, len(ids), last_only))
        self.length += len(ids)

    def crop(self, length):
        self.log.append((self.name, "crop", length))
        self.length = length


def test_time_rounds_takes_every_lane_in_turn_each_round_and_crops_back():
    log = []

    @contextmanager
    def around():
        log.append("enter")
        yield
        log.append("exit")

    lanes = {"t": Lane(Recorder("t", log), (1, 3)), "d": Lane(Recorder("d", log), (1,), last_only=True, around=around)}
    runs = time_rounds(lanes, list(range(5)), repeats=2)
    one_round = [("t", 1, False), ("t", "crop", 10), ("t", 3, False), ("t", "crop", 10),
                 "enter", ("d", 1, True), ("d", "crop", 10), "exit"]
    assert log == one_round * 2
    assert set(runs) == {("t", 1), ("t", 3), ("d", 1)} and all(len(v) == 2 and min(v) >= 0 for v in runs.values())


def test_no_products_zeroes_every_product_and_gives_them_back(tiny_pair):
    from specdec.kernels.variants import draft_model

    ids = torch.tensor([[1, 2, 3]])
    for model in (tiny_pair.target, draft_model(tiny_pair, "int8")):  # nn.Linear, and this project's QuantLinear
        with torch.inference_mode():
            before = model(input_ids=ids).logits
            with no_products(model):
                zeroed = model(input_ids=ids).logits
            after = model(input_ids=ids).logits
        assert before.abs().max() > 0 and torch.equal(zeroed, torch.zeros_like(zeroed))
        assert torch.equal(before, after)


ARGV = ["passes", "--pair", "tiny-random", "--dtype", "fp32", "--runner", "eager,static", "--target-kernel", "bf16,int8",
        "--draft-variant", "bf16,int4", "--sizes", "1,3", "--repeats", "2", "--no-lock"]


def test_passes_times_each_runner_kernel_variant_and_size(capsys):
    assert main(ARGV + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    got = {(p["model"], p["name"], p["runner"], p["tokens"]) for p in result["passes"]}
    want = {("target", k, r, n) for k in ("bf16", "int8") for r in ("eager", "static") for n in (1, 3)}
    assert got == want | {("draft", v, r, 1) for v in ("bf16", "int4") for r in ("eager", "static")}
    for p in result["passes"]:
        assert len(p["runs_s"]) == 2 and p["median_s"] == statistics.median(p["runs_s"]) > 0 and p["products"]
    assert result["resident_gb"]["target int8"] < result["resident_gb"]["target bf16"]

    med = {(p["model"], p["name"], p["runner"], p["tokens"]): p["median_s"] for p in result["passes"]}
    text = tables(result)
    static_over_eager = med["target", "bf16", "static", 1] / med["target", "bf16", "eager", 1]
    assert re.search(rf"\| target bf16 \| 1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| {static_over_eager:.3f} \|", text)
    step = med["target", "int8", "eager", 1]
    cells = [step / med["target", "bf16", "eager", 1], med["target", "int8", "eager", 3] / step, med["draft", "int4", "eager", 1] / step]
    assert f"| eager | int8 | {1e3 * step:.1f} | {cells[0]:.3f} | {cells[1]:.2f} | " in text and f"| {cells[2]:.3f} |" in text


def test_passes_without_products(capsys):
    argv = ["passes", "--pair", "tiny-random", "--dtype", "fp32", "--runner", "eager", "--draft-variant", "bf16",
            "--sizes", "1", "--repeats", "2", "--no-lock", "--without-products"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| target bf16, without products | 1 |" in text and "| draft bf16, without products | 1 |" in text
    assert re.search(r"\| target bf16 \| 1 \| eager \| [0-9.]+ \| [0-9.]+ \| -?[0-9.]+ \| [0-9]+% \|", text)


@pytest.mark.parametrize("change, message", [
    (["--sizes", "0,6"], "sizes must be positive integers"),
    (["--sizes", "one"], "sizes must be positive integers"),
    (["--draft-variant", "int3"], "draft_variant must be one of"),
    (["--runner", "warp"], "runner must be one of"),
    (["--runner", "compiled", "--without-products"], "--without-products times eager and static passes"),
    (["--repeats", "0"], "context and repeats must be >= 1"),
])
def test_passes_bad_input_exits_2_naming_it(capsys, change, message):
    assert main(ARGV + change) == 2
    assert message in capsys.readouterr().err


def test_a_second_measurement_waits_and_says_who_holds_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    said, entered = io.StringIO(), threading.Event()

    def second():
        with one_measurement("second", out=said):
            entered.set()

    with one_measurement("the first"):
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.5)
        assert not entered.is_set()  # held: the second waits
        assert said.getvalue() == f"waiting for pid {os.getpid()}, the first to finish (lock {tmp_path / 'measure.lock'})\n"
    waiter.join(timeout=10)
    assert entered.is_set()
    with one_measurement("third", out=said):  # free again, and taken without a word
        pass
    assert said.getvalue().count("waiting") == 1
