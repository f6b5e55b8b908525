"""Empty the CPU's caches before a timed pass, as a run's target pass does for what comes after it.

A decode step streams the target's weights (about a gigabyte) through the caches, so the first
pass of a drafter after it finds its own weights in memory, not in the cache. Timed again and again
on their own, the same passes stay in a large last-level cache: the trained head's first draft
(about 100 MB of weights) timed 4.5 ms that way and 9.9 ms after the caches were emptied, against
8.8 ms inside runs (a 2-core Intel Xeon with a 480 MB last-level cache, `w4a8` target). Reading a
buffer twice the size of the last-level cache empties it; a target that streams fewer bytes than
that empties only as much (tiny-random's passes leave a drafter's weights where they were). On a
GPU nothing is done: its L2 is small beside what a pass reads.
"""

from __future__ import annotations

from pathlib import Path

import torch

FALLBACK_CACHE_BYTES = 128 << 20  # where the last-level cache's size cannot be read
LARGEST = 1 << 30  # the buffer is at most this (reading it takes tens of milliseconds)


def last_level_cache_bytes() -> int:
    """The largest cache the CPU reports (Linux sysfs), or FALLBACK_CACHE_BYTES."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = entry.read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            continue
    return max(sizes) if sizes else FALLBACK_CACHE_BYTES


class CacheEmptier:
    """Reads as many bytes as a target pass streams (`streamed`; None: enough to empty the cache), at
    most twice the last-level cache's size, before each timed pass on a CPU. Its buffer lives as long
    as the emptier: a timing holds one, so the process does not keep up to 1 GiB after it."""

    def __init__(self, device: torch.device, streamed: int | None = None):
        self.buffer = None
        if device.type == "cpu":
            n = min(2 * last_level_cache_bytes(), LARGEST) // 4
            if streamed is not None:
                n = min(n, streamed // 4)
            self.buffer = torch.ones(n, dtype=torch.float32)  # (n,)

    def __call__(self) -> None:
        """Empty the caches as the target's pass would (nothing on a GPU)."""
        if self.buffer is not None:
            self.buffer.sum()
