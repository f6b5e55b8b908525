"""What the app loads before its first visitor on ZeroGPU (specdec/serving/startup.py): every offered
pair built on the CPU with what the GPU is offered, then placed; in the main thread only."""

import threading

import pytest
import torch

from specdec.serving import startup
from specdec.serving.pairs import Offer, PairStore


def test_each_offered_pair_is_built_with_what_the_gpu_is_offered_then_placed(monkeypatch):
    placed = []
    monkeypatch.setattr(startup, "place", lambda pair, device: placed.append((pair.name, pair.device.type, device.type)))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    store = PairStore(Offer("tiny-random", ("tiny-random", "smollm2-1.7b/135m")), device="cpu", dtype="fp32",
                      loads_on_demand=False)
    lines = startup.place_for_zero_gpu(store, device=torch.device("cuda"))
    assert placed == [("tiny-random", "cpu", "cuda")]  # built on the CPU, then handed over to be placed
    pair = store.loaded_pair("tiny-random")
    assert set(pair.built.drafts) == {"dense-v16k", "dense-v32k"}  # the GPU's draft variants; nothing CPU-only is built
    assert not pair.built.kernels  # the GPU's one target kernel, dense, is the pair's own target
    assert lines[0].startswith("placed tiny-random on cuda (fp32) from built in code, with target kernel dense, draft variant dense")
    assert lines[1].startswith("error: could not load pair 'smollm2-1.7b/135m' at start-up:")  # offline: the others still serve


def test_only_the_main_thread_places_pairs():
    store = PairStore(Offer("tiny-random", ("tiny-random",)), device="cpu", dtype="fp32", loads_on_demand=False)
    errors = []

    def elsewhere():
        try:
            startup.place_for_zero_gpu(store)
        except RuntimeError as err:
            errors.append(str(err))

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    assert errors == ["pairs for ZeroGPU are placed on the GPU in the main thread, where `spaces` emulates CUDA"]
    with pytest.raises(ValueError):
        store.loaded_pair("tiny-random")  # PairUnavailable: nothing was loaded
