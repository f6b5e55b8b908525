"""A decode step's physical limit: the bytes it must read from memory over the rate this machine
reads memory at.

A one-token pass reads every weight once (the input embedding table aside: a token reads one row of
it), and on a CPU nothing else it does costs as much, so no kernel's decode step can beat
`streamed_bytes / read_rate`. `python -m specdec passes` prints that limit beside each target
kernel's measured step, and how far the step is from it (docs/kernels.md, "The physical limit")."""

from __future__ import annotations

import functools
import statistics
import time

import torch
from torch import nn

from specdec.kernels.quant import module_bytes

READ_MIB = 512  # far beyond any CPU's caches, so the sum reads memory, not cache
READ_REPEATS = 7


def streamed_bytes(model: nn.Module) -> int:
    """Bytes a decode step of `model` reads at least: its parameters and buffers once each, less the
    input embedding table, of which one token reads one row (unless the output head shares it)."""
    total = module_bytes(model)
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embedding is None:
        return total
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and storages(embedding) & storages(head):
        return total  # tied: the output head reads the whole table every step
    return total - module_bytes(embedding)


def storages(module: nn.Module) -> set[int]:
    """Where a module's parameters and buffers live (shared storages: tied weights)."""
    return {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}


def read_rate(device: torch.device | str = "cpu", mib: int = READ_MIB, repeats: int = READ_REPEATS) -> float:
    """Bytes a second this machine reads from `device`'s memory with torch's threads: the median of
    `repeats` sums over `mib` MiB of float32, after one sum to warm up."""
    device = torch.device(device)
    x = torch.ones(mib * 2**20 // 4, device=device)  # (n,) float32
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x.sum()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        x.sum()
        sync()
        times.append(time.perf_counter() - start)
    return x.numel() * x.element_size() / statistics.median(times)


@functools.cache
def process_read_rate(device: torch.device) -> float:
    """read_rate, measured once per process and device (about a second; a first start measures several
    tables within its budget): the cost tables carry it beside the decode step they time, so the page
    can say how far each step is from its limit. A table measured again later in the same process
    keeps the first figure."""
    return read_rate(device)
