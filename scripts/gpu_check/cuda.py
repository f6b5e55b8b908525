"""The check's CUDA-only calls, in one place: the real ones on a GPU, stand-ins in the CPU dry run.

Every section calls these instead of torch.cuda, so on a CPU each section's own code runs whole
(its loops, its reading of events, its bookkeeping) with only these calls stubbed: a crash in a
section shows in the dry run, not first on a GPU whose time is counted in minutes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import contextmanager

import torch


class SyncTally:
    """Synchronizing CUDA calls seen in a block (count is set when the block ends; None: not counted)."""

    count: int | None = None


class RealCuda:
    dry = False

    def __init__(self, device: torch.device):
        self.device = device

    def name(self) -> str:
        return torch.cuda.get_device_name(self.device)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak_gb(self) -> float:
        return round(torch.cuda.max_memory_allocated(self.device) / 2**30, 2)

    @contextmanager
    def count_syncs(self):
        """Count the calls inside that make the host wait for the device (torch's sync debug mode
        warns once for each)."""
        tally = SyncTally()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield tally
            finally:
                torch.cuda.set_sync_debug_mode("default")
        tally.count = sum("synchroniz" in str(w.message) for w in caught)

    def capture(self, body: Callable[[], None], pool) -> Callable[[], None]:
        """body() captured as one CUDA graph (after the caller's warm-up) -> its replay."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            body()
        return graph.replay


class DryCuda:
    """The stand-ins: nothing to wait for, no memory statistics, no sync count, and a "graph" that
    replays by running its body again (the same tensors, the same order of operations)."""

    dry = True

    def __init__(self, device: torch.device):
        self.device = device

    def name(self) -> str:
        return f"{self.device.type} (dry run: CUDA calls stubbed)"

    def synchronize(self) -> None:
        pass

    def reset_peak(self) -> None:
        pass

    def peak_gb(self) -> None:
        return None

    @contextmanager
    def count_syncs(self):
        yield SyncTally()

    def capture(self, body: Callable[[], None], pool) -> Callable[[], None]:
        return body


def for_device(device: torch.device) -> RealCuda | DryCuda:
    return RealCuda(device) if device.type == "cuda" else DryCuda(device)
