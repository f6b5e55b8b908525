"""A step of the static runner in steady state reads the device once and sends nothing from Python
data to it: counted with a torch function mode around each step (every torch call made in it, the
models' passes included, goes through the mode). Each runner is counted on the CPU's attention and
on the one CUDA runs (specdec/kernels/attention.py, chosen here by patching the device check and
setting each model's attention as a move does)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.overrides import TorchFunctionMode

from specdec.core.config import GenerationConfig
from specdec.core.proposers import model as model_proposer
from specdec.engines.ours import OurSource
from specdec.kernels import attention
from specdec.kernels.batch_invariant import is_batch_invariant

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
    """One Counter per step but those that feed the prompt: the first, and the one in which the draft
    model first drafts (it reads the prompt then: specdec.core.proposers.model)."""
    decoding = OurSource(pair, config).run(PROMPT)
    model = next((p for p in decoding.proposers if p.name == "model"), None)
    run = iter(decoding)
    next(run)
    counters = []
    while True:
        unread = model is not None and not model.prompt_read
        with Counter() as counter:
            event = next(run, None)
        if event is None:
            return counters
        if not (unread and model.prompt_read):
            counters.append(counter)


def ran_on(model, device: str) -> str:
    """The attention a model runs on this kind of device: the rows where it is batch-invariant and
    they run there (the fp32 target on a CPU with the kernel library), else the device's path."""
    return attention.ROWS if is_batch_invariant(model) and attention.rows_run_on(device) else attention.attention_for(device)


def set_for_device(pair) -> None:
    """Each model's attention as a move to the (patched) device sets it (specdec/serving/startup.py)."""
    for model in (pair.target, pair.draft):
        attention.set_attention(model, invariant=is_batch_invariant(model))


@pytest.fixture(params=["cpu", "cuda"])
def device_attention(request, tiny_pair, monkeypatch):
    """The kind of device the run's models run on (their tensors stay on the CPU), each model's
    attention set for it; the pair's models get their own device's back afterwards."""
    monkeypatch.setattr(attention, "device_type", lambda model: request.param)
    set_for_device(tiny_pair)
    yield request.param
    monkeypatch.undo()
    set_for_device(tiny_pair)


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
    # the run's passes ran this device's path, or on the CPU the batch-invariant rows of the fp32 target
    assert tiny_pair.target.config._attn_implementation == ran_on(tiny_pair.target, device_attention)
    assert tiny_pair.draft.config._attn_implementation == attention.attention_for(device_attention)
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
