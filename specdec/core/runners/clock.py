"""Draft and verify seconds of one step, measured without making the host wait for the device."""

from __future__ import annotations

import time

import torch


class StepClock:
    """mark(0) before drafting, mark(1) after, mark(2) after the check; seconds() once the step's
    read has come back. On a CPU the marks are the host's clock (the work is done when the call
    returns). On a GPU they are CUDA events recorded in the stream: the times are the device's, and
    reading them after the step's one transfer (which waited for the stream) waits for nothing more."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if self.cuda else None
        self.times = [0.0, 0.0, 0.0]

    def mark(self, i: int) -> None:
        if self.cuda:
            self.events[i].record()
        else:
            self.times[i] = time.perf_counter()

    def seconds(self) -> tuple[float, float]:
        """(draft seconds, verify seconds) of the marked step."""
        if self.cuda:
            return self.events[0].elapsed_time(self.events[1]) / 1000, self.events[1].elapsed_time(self.events[2]) / 1000
        return self.times[1] - self.times[0], self.times[2] - self.times[1]
