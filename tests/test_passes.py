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


ARGV = ["passes", "--pair", "tiny-random", "--dtype", "fp32", "--runner", "eager,static", "--target-kernel", "dense,int8",
        "--draft-variant", "dense,int4", "--sizes", "1,3", "--repeats", "2", "--no-lock"]


def test_passes_times_each_runner_kernel_variant_and_size(capsys):
    assert main(ARGV + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    got = {(p["model"], p["name"], p["runner"], p["tokens"]) for p in result["passes"]}
    want = {("target", k, r, n) for k in ("dense", "int8") for r in ("eager", "static") for n in (1, 3)}
    assert got == want | {("draft", v, r, 1) for v in ("dense", "int4") for r in ("eager", "static")}
    for p in result["passes"]:
        assert len(p["runs_s"]) == 2 and p["median_s"] == statistics.median(p["runs_s"]) > 0 and p["products"]
    assert result["resident_gb"]["target int8"] < result["resident_gb"]["target dense"]

    med = {(p["model"], p["name"], p["runner"], p["tokens"]): p["median_s"] for p in result["passes"]}
    text = tables(result)
    static_over_eager = med["target", "dense", "static", 1] / med["target", "dense", "eager", 1]
    assert re.search(rf"\| target dense \| 1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| {static_over_eager:.3f} \|", text)
    step = med["target", "int8", "eager", 1]
    cells = [step / med["target", "dense", "eager", 1], med["target", "int8", "eager", 3] / step, med["draft", "int4", "eager", 1] / step]
    assert f"| eager | int8 | {1e3 * step:.1f} | {cells[0]:.3f} | {cells[1]:.2f} | " in text and f"| {cells[2]:.3f} |" in text


def test_passes_without_products(capsys):
    argv = ["passes", "--pair", "tiny-random", "--dtype", "fp32", "--runner", "eager", "--draft-variant", "dense",
            "--sizes", "1", "--repeats", "2", "--no-lock", "--without-products"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| target dense, without products | 1 |" in text and "| draft dense, without products | 1 |" in text
    assert re.search(r"\| target dense \| 1 \| eager \| [0-9.]+ \| [0-9.]+ \| -?[0-9.]+ \| [0-9]+% \|", text)


def test_a_forced_kernel_path_is_named_in_the_heading(capsys, monkeypatch):
    """A run of the AVX2 path on an AVX-512 CPU says so, beside the CPU it ran on."""
    monkeypatch.setenv("SPECDEC_W4A8_PATH", "avx2")
    monkeypatch.delenv("SPECDEC_W8A8_PATH", raising=False)
    argv = ["passes", "--pair", "tiny-random", "--dtype", "fp32", "--runner", "eager", "--target-kernel", "bf16",
            "--draft-variant", "bf16", "--sizes", "1", "--repeats", "1", "--no-lock"]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("; SPECDEC_W4A8_PATH=avx2")
    monkeypatch.delenv("SPECDEC_W4A8_PATH")
    assert main(argv) == 0
    assert "PATH=" not in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize("change, message", [
    (["--sizes", "0,6"], "sizes must be positive integers"),
    (["--sizes", "one"], "sizes must be positive integers"),
    (["--draft-variant", "int3"], "draft_variant must be one of"),
    (["--runner", "warp"], "runner must be one of"),
    (["--runner", "compiled", "--without-products"], "--without-products times eager and static passes"),
    (["--repeats", "0"], "context and repeats must be >= 1"),
    (["--drafter", "heads"], "drafter must be model, head or both"),
    (["--runner", "compiled", "--invariance-cost"], "--invariance-cost times eager and static passes"),
])
def test_passes_bad_input_exits_2_naming_it(capsys, change, message):
    assert main(ARGV + change) == 2
    assert message in capsys.readouterr().err


def test_passes_invariance_cost_times_each_invariant_target_with_its_invariance_undone(capsys):
    from specdec.kernels.batch_invariant import invariant_kernel

    argv = ["passes", "--pair", "tiny-random", "--dtype", "fp32", "--runner", "eager,static", "--target-kernel", "dense,q4k",
            "--draft-variant", "dense", "--sizes", "1,3", "--repeats", "2", "--no-lock", "--invariance-cost", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    undone = {(p["model"], p["name"], p["runner"], p["tokens"]) for p in result["passes"] if p["invariance_undone"]}
    invariant = invariant_kernel("dense", "fp32")  # where the kernel library runs here; q4k never is
    assert undone == ({("target", "dense", r, n) for r in ("eager", "static") for n in (1, 3)} if invariant else set())
    if invariant:
        text = tables(result)
        assert "| target dense, batch invariance undone | 3 |" in text
        assert re.search(r"\| target dense \| 3 \| static \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|", text)


def test_passes_head_without_a_head_says_so_and_exits_2(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))  # no head trained on this machine for tiny-random
    argv = ["passes", "--pair", "tiny-random", "--dtype", "fp32", "--runner", "eager", "--sizes", "1", "--repeats", "1",
            "--no-lock", "--drafter", "head"]
    assert main(argv) == 2
    assert "drafter 'head' is not offered for pair 'tiny-random': no head trained for this pair" in capsys.readouterr().err


def test_passes_head_times_the_heads_step_beside_each_target_kernel(capsys, tiny_pair, tmp_path, monkeypatch):
    from specdec.kernels import head_offer
    from specdec.kernels.head_store import save_head
    from specdec.train.recipe import Recipe
    from specdec.train.trainer import new_head

    path = tmp_path / "tiny-random.safetensors"  # an untrained head costs what a trained one does
    save_head(path, new_head(tiny_pair.target, Recipe(intermediate=64), seed=0), head_offer.target_key(tiny_pair), {"intermediate": 64}, {})
    monkeypatch.setattr(head_offer, "trained_path", lambda name: path)
    argv = ["passes", "--pair", "tiny-random", "--dtype", "fp32", "--runner", "eager", "--target-kernel", "dense,int8",
            "--sizes", "1", "--repeats", "2", "--no-lock", "--drafter", "model,head", "--draft-variant", "dense", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert [(h["target_kernel"], h["head_kernel"]) for h in result["heads"]] == [("dense", "dense"), ("int8", "dense")]
    assert all(h["median_s"] > 0 and h["first_s"] > 0 for h in result["heads"]) and result["variants"] == ["dense"]
    text = tables(result)
    step = next(p["median_s"] for p in result["passes"] if p["name"] == "int8" and p["tokens"] == 1)
    assert f"| {result['heads'][1]['first_s'] / step:.3f} |" in text
    assert "head drafts, dense head (beside target dense, int8):" in text


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


def test_passes_prints_each_target_kernels_physical_limit(capsys):
    """Beside each kernel's decode step: the bytes it reads over the measured read rate, and the ratio."""
    assert main(ARGV + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["read_gbs"] > 0 and result["streamed_gb"]["int8"] < result["streamed_gb"]["dense"]
    text = tables(result)
    step = statistics.median(next(p["runs_s"] for p in result["passes"]
                                  if (p["model"], p["name"], p["runner"], p["tokens"]) == ("target", "int8", "eager", 1)))
    limit = result["streamed_gb"]["int8"] / result["read_gbs"]
    assert f"| eager | int8 | {result['streamed_gb']['int8']:.3f} | {1e3 * limit:.1f} | {1e3 * step:.1f} | {step / limit:.2f} |" in text
    assert f"memory read at {result['read_gbs']:.1f} GB/s" in text


def test_streamed_bytes_leave_out_the_input_embedding_unless_the_head_shares_it():
    from torch import nn

    from specdec.kernels.quant import module_bytes
    from specdec.measure.stream_rate import streamed_bytes

    class Tiny(nn.Module):
        def __init__(self, tied: bool):
            super().__init__()
            self.embed, self.body, self.head = nn.Embedding(100, 8), nn.Linear(8, 8), nn.Linear(8, 100, bias=False)
            if tied:
                self.head.weight = self.embed.weight

        def get_input_embeddings(self):
            return self.embed

        def get_output_embeddings(self):
            return self.head

    untied, tied = Tiny(False), Tiny(True)
    assert streamed_bytes(untied) == module_bytes(untied) - 100 * 8 * 4
    assert streamed_bytes(tied) == module_bytes(tied)  # the head reads the whole table every step
    assert streamed_bytes(nn.Linear(8, 8)) == module_bytes(nn.Linear(8, 8))
