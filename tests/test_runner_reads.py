"""A step of the static runner in steady state reads the device once and sends nothing from Python
data to it: counted with a torch function mode around each step (every torch call made in it, the
models' passes included, goes through the mode). Each runner is counted on the CPU's attention and
on the one CUDA runs (specdec/core/runners/attention.py, chosen here by patching the device check)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.overrides import TorchFunctionMode

from specdec.core.config import GenerationConfig
from specdec.core.proposers import model as model_proposer
from specdec.core.runners import attention
from specdec.engines.ours import OurSource

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__,
         torch.Tensor.__index__, torch.Tensor.cpu, torch.Tensor.numpy}


class Counter(TorchFunctionMode):
    """Counts reads of a tensor's values on the host, and tensors made from Python lists."""

    def __init__(self):
        super().__init__()
        self.reads, self.from_python = [], []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READS:
            self.reads.append(func.__name__)
        if func in (torch.tensor, torch.as_tensor) and args and isinstance(args[0], (list, tuple, int, float)):
            self.from_python.append(func.__name__)
        return func(*args, **(kwargs or {}))


def counted_steps(pair, config) -> list[Counter]:
    """One Counter per step after the first (the first also feeds the prompt)."""
    run = iter(OurSource(pair, config).run(PROMPT))
    next(run)
    counters = []
    while True:
        with Counter() as counter:
            event = next(run, None)
        if event is None:
            return counters
        counters.append(counter)


def kept_on(model, path: str) -> tuple[str, ...]:
    """The attention kept for the model on the device whose path is `path`, if any."""
    kept_device, kept = getattr(model, attention.KEPT, (None, None))
    return (kept,) if kept and attention.attention_for(kept_device) == path else ()


@pytest.fixture(params=["cpu", "cuda"])
def device_attention(request, tiny_pair, monkeypatch):
    """The attention path of this kind of device for the run's models (their tensors stay on the
    CPU); the pair's models get their own device's path back afterwards."""
    monkeypatch.setattr(attention, "device_type", lambda model: request.param)
    yield attention.attention_for(request.param)
    monkeypatch.undo()
    for model in (tiny_pair.target, tiny_pair.draft):
        attention.use_device_attention(model)


@pytest.mark.parametrize("config", [
    GenerationConfig(k=4, max_new_tokens=32),
    GenerationConfig(k=4, temperature=0.8, top_p=0.9, top_k=50, seed=1, max_new_tokens=32),
    GenerationConfig(k=6, draft_confidence=0.5, max_new_tokens=32),
    GenerationConfig(k=6, draft_confidence=0.5, temperature=0.8, seed=2, max_new_tokens=32),
    GenerationConfig(k=4, drafter="auto", max_new_tokens=32),
    GenerationConfig(drafter="none", max_new_tokens=16),
], ids=["greedy", "sampling", "early-stop", "early-stop-sampling", "auto", "plain"])
@pytest.mark.parametrize("runner", ["static", "eager"])
def test_a_step_reads_once_and_sends_nothing(tiny_pair, config, runner, device_attention, monkeypatch):
    """As on a GPU: the early stop decided on the device (FREE_READS empty). The eager runner's
    step is the same step over transformers' growing cache: it reads once too."""
    monkeypatch.setattr(model_proposer, "FREE_READS", ())
    counters = counted_steps(tiny_pair, replace(config, runner=runner))
    # the run's passes ran this path, or on the CPU the batch-invariant rows kept for the fp32 target
    assert tiny_pair.target.config._attn_implementation in {device_attention, *kept_on(tiny_pair.target, device_attention)}
    assert len(counters) >= 4
    for i, c in enumerate(counters):
        assert c.reads == ["tolist"] and c.from_python == [], f"step {i + 1}: reads {c.reads}, from Python {c.from_python}"


def test_on_a_cpu_the_early_stop_reads_the_top_probability_of_each_pass(tiny_pair):
    """Where tensors live in host memory the draft stops as the eager drafter does: one read of its
    top probability per pass but the last, still one read of the step's result."""
    counters = counted_steps(tiny_pair, GenerationConfig(k=6, draft_confidence=0.5, max_new_tokens=32, runner="static"))
    assert all(c.reads.count("tolist") == 1 and set(c.reads) <= {"tolist", "item"} and not c.from_python for c in counters)
    assert any(c.reads.count("item") >= 1 for c in counters)


def test_the_counter_sees_reads_and_tensors_made_from_python_data():
    """The check can fail: the counter sees a read of a value and a tensor made from a list."""
    with Counter() as counter:
        torch.tensor([1, 2, 3]).sum().item()
    assert counter.reads == ["item"] and counter.from_python == ["tensor"]
