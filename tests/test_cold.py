"""specdec/measure/cold.py: the bytes read before a head's first draft is timed follow what the
target's pass streams, capped at twice the last-level cache; nothing is read or held on a GPU."""

import torch

from specdec.measure import cold


def test_the_emptier_reads_what_the_target_streams_up_to_twice_the_cache(monkeypatch):
    monkeypatch.setattr(cold, "last_level_cache_bytes", lambda: 4 << 20)  # a 4 MiB cache
    cpu = torch.device("cpu")
    assert cold.CacheEmptier(cpu, 1 << 20).buffer.numel() * 4 == 1 << 20  # a small target: only what it streams
    assert cold.CacheEmptier(cpu, 1 << 30).buffer.numel() * 4 == 8 << 20  # a large one: twice the cache
    assert cold.CacheEmptier(cpu).buffer.numel() * 4 == 8 << 20
    cold.CacheEmptier(cpu, 1 << 20)()  # reads without error
    on_gpu = cold.CacheEmptier(torch.device("cuda"), 1 << 30)
    assert on_gpu.buffer is None
    on_gpu()  # nothing to read


def test_the_cache_size_comes_from_the_largest_cache_reported():
    assert cold.last_level_cache_bytes() >= 1 << 10
