"""What the app loads before its first visitor.

Anywhere but ZeroGPU: the default pair, and on a CPU the measurement of what is fastest here
(specdec.serving.defaults_here: kept from an earlier start, else timed now within its budget, with a
progress bar), then the target kernel and draft variant the page starts on, on the torch thread
(where every run will use them; specdec.serving.torch_thread says why). Other pairs, variants and
kernels are built when first asked for.

On ZeroGPU the app's process has no GPU. The `spaces` package stands in for CUDA there with a
torch function mode entered in the thread that imported it (the main thread) and in no other: a
tensor moved to "cuda" in that thread stays in host memory, and `spaces` moves it onto the card in
each GPU worker it forks; the same move on any other thread (the torch thread, Gradio's workers)
reaches CUDA's initialisation, which `spaces` makes raise. And whatever is built inside a GPU call
takes time the duration asked for does not cover. So on ZeroGPU every offered pair is built here,
at module level of app.py, in the main thread, on the CPU, with every draft variant and target
kernel that runs on the GPU (specdec.kernels.device_offer), and then moved to "cuda" in one go.
"""

from __future__ import annotations

import threading

import torch

from specdec.kernels import device_offer
from specdec.kernels.attention import set_attention
from specdec.kernels.batch_invariant import is_batch_invariant
from specdec.kernels.target_kernels import kernel_target
from specdec.kernels.variants import draft_model
from specdec.models import machine
from specdec.models.dtypes import dtype_name
from specdec.models.pair import ModelPair, build_pair
from specdec.serving import defaults_here, torch_thread
from specdec.serving.pairs import PairStore, describe

CUDA = torch.device("cuda")


def preload(store: PairStore) -> list[str]:
    """Load what the app serves first; one line per pair for the log. ValueError when a pair
    cannot load (the page says the same to each visitor who asks for it)."""
    if machine.zero_gpu():
        return place_for_zero_gpu(store)
    pair = store.get(store.default)
    lines = [measure_defaults(pair)]
    chosen = defaults_here.start_defaults(pair.name, pair.device)  # what the page starts on
    torch_thread.call(kernel_target, pair, chosen.target_kernel)  # from its disk cache, or built once
    if pair.draft is not None:
        torch_thread.call(draft_model, pair, chosen.draft_variant)
    loaded = f"loaded {pair.name} on {pair.device} ({pair.dtype_name}) from {pair.source}"
    return [f"{loaded}, target kernel {chosen.target_kernel}, draft variant {chosen.draft_variant}", *filter(None, lines)]


def measure_defaults(pair: ModelPair) -> str:
    """Measure (or read) what is fastest here for the pair, on the torch thread; one line for the log.
    A measurement that fails leaves the recorded table's entry, and says why."""
    try:
        measured = torch_thread.call(defaults_here.ensure, pair, True)
    except (ValueError, RuntimeError, OSError) as err:
        return f"defaults not measured ({err}): {defaults_here.start_defaults(pair.name, pair.device).line}"
    return measured.line if measured is not None else ""


def place_for_zero_gpu(store: PairStore, device: torch.device = CUDA) -> list[str]:
    """Every offered pair built on the CPU with what `device` is offered, then placed on it, and
    kept in `store`. Must run in the thread that imported `spaces`: the main thread."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("pairs for ZeroGPU are placed on the GPU in the main thread, where `spaces` emulates CUDA")
    lines = []
    for name in store.offer.names:
        try:
            pair = build_pair(name, device="cpu", dtype=dtype_name(store.pair_dtype))
        except Exception as err:  # this pair is not served (the page says so to who asks); the others still are
            lines.append(f"error: could not load pair {name!r} at start-up: {describe(err)}")
            continue
        built = build_offered(pair, device)
        place(pair, device)
        store.adopt(name, pair)
        lines.append(f"placed {name} on {device.type} ({pair.dtype_name}) from {pair.source}, with {', '.join(built)}")
    return lines


def build_offered(pair: ModelPair, device: torch.device) -> list[str]:
    """Build, where `pair` is now, each draft variant and target kernel `device` is offered."""
    built = []
    for kernel in device_offer.target_kernels(device).names:
        kernel_target(pair, kernel)
        built.append(f"target kernel {kernel}")
    if pair.draft is not None:
        for variant in device_offer.draft_variants(device).names:
            draft_model(pair, variant)
            built.append(f"draft variant {variant}")
    return built


def place(pair: ModelPair, device: torch.device) -> None:
    """Move the pair's models and every model built from them to `device` (specdec.models.built),
    each set to the attention it runs there (specdec/kernels/attention.py: the device's path, or the
    batch-invariant rows where the model is batch-invariant and they run there); a built head is
    built again there when next asked for."""
    for model in (pair.target, pair.draft, *pair.built.modules()):
        if model is not None:
            model.to(device)
            set_attention(model, invariant=is_batch_invariant(model))
    pair.built.forget_heads()
    pair.device = device
