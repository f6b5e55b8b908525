"""Pairs on a shared deployment: what is offered, and a store that never takes a pair from under a run."""

import pytest

from specdec.serving import pairs
from specdec.models.presets import DEFAULT_PAIR
from specdec.models.pair import load_pair
from specdec.serving.pairs import GB, Offer, PairStore, PairUnavailable

SMOL, BIG, TINY = "smollm2-1.7b/135m", "qwen2.5-coder-7b/0.5b", "tiny-random"


class Builder:
    """Stands in for build_pair: records the calls, returns a fresh object per load, fails on request."""

    def __init__(self, fail=()):
        self.calls, self.fail = [], set(fail)

    def __call__(self, name, **kwargs):
        self.calls.append(name)
        if name in self.fail:
            raise OSError(f"{name} is not in the local cache and the Hub is offline")
        return object()


def store(build, names=(DEFAULT_PAIR, TINY, SMOL), free=lambda: 100 * GB):
    return PairStore(Offer(DEFAULT_PAIR, tuple(names)), device="cpu", dtype="fp32", build=build, free_memory=free)


def test_unknown_entries_in_the_environment_are_refused():
    with pytest.raises(ValueError, match=r"SPECDEC_PAIRS names unknown presets 'gpt-9/1b'"):
        pairs.listed_pairs({"SPECDEC_PAIRS": "tiny-random, gpt-9/1b"})
    with pytest.raises(ValueError, match="pair must be one of"):
        pairs.default_pair({"SPECDEC_PAIR": "gpt-9/1b"})


def test_listed_pairs_gpu_presets_hidden_on_a_cpu_default_first():
    offer = pairs.offered_pairs({"SPECDEC_PAIRS": f"{TINY},{BIG},{SMOL}"}, device=pairs.torch.device("cpu"), dtype="fp32")
    assert offer.default == TINY and offer.names == (TINY, SMOL)
    assert offer.hidden == {BIG: "needs a GPU"}
    explicit = pairs.offered_pairs({"SPECDEC_PAIRS": TINY, "SPECDEC_PAIR": DEFAULT_PAIR}, device=pairs.torch.device("cpu"))
    assert explicit.names == (DEFAULT_PAIR, TINY)


def test_default_offer_offline_is_what_loads_without_a_download(monkeypatch):
    monkeypatch.setattr(pairs, "in_hub_cache", lambda repo: repo.startswith("HuggingFaceTB/"))
    monkeypatch.setattr(pairs.bundle, "bundle_available", lambda name: False)
    monkeypatch.setattr(pairs.bundle, "is_converted", lambda name: False)
    offer = pairs.offered_pairs({"HF_HUB_OFFLINE": "1", "SPECDEC_PAIR": TINY}, device=pairs.torch.device("cpu"), dtype="fp32")
    assert offer.names == (TINY, SMOL)  # the bundle is gone, SmolLM2 is in the local cache
    assert "offline" in offer.hidden[DEFAULT_PAIR] and offer.hidden[BIG] == "needs a GPU"
    monkeypatch.setattr(pairs.bundle, "is_converted", lambda name: True)  # a converted copy needs no packages
    assert DEFAULT_PAIR in pairs.offered_pairs({"HF_HUB_OFFLINE": "1"}, device=pairs.torch.device("cpu")).names


def test_default_offer_online_is_what_fits_the_device(monkeypatch):
    monkeypatch.setattr(pairs, "in_hub_cache", lambda repo: False)
    monkeypatch.setattr(pairs, "memory", lambda device: (4 * GB, 8 * GB))
    offer = pairs.offered_pairs({"SPECDEC_PAIR": TINY}, device=pairs.torch.device("cpu"), dtype="fp32")
    assert SMOL not in offer.names and "needs about 8.4 GB; the cpu has 8.0 GB" in offer.hidden[SMOL]
    monkeypatch.setattr(pairs, "memory", lambda device: (4 * GB, 32 * GB))
    offer = pairs.offered_pairs({"SPECDEC_PAIR": TINY}, device=pairs.torch.device("cpu"), dtype="fp32")
    assert SMOL in offer.names and offer.hidden[BIG] == "needs a GPU"


def test_switching_keeps_the_default_and_one_extra():
    build = Builder()
    s = store(build)
    with s.acquire(DEFAULT_PAIR) as default:
        pass
    with s.acquire(TINY):
        pass
    with s.acquire(SMOL):
        pass
    assert s.loaded() == [DEFAULT_PAIR, SMOL]  # tiny-random went once SmolLM2 had loaded
    with s.acquire(DEFAULT_PAIR) as again:
        assert again is default
    assert build.calls == [DEFAULT_PAIR, TINY, SMOL]


def test_a_failed_load_leaves_every_loaded_pair_serving():
    build = Builder(fail={SMOL})
    s = store(build)
    with s.acquire(DEFAULT_PAIR) as default, s.acquire(TINY) as tiny:
        pass
    with pytest.raises(PairUnavailable, match=r"could not load pair 'smollm2-1.7b/135m': OSError: .* Hub is offline"):
        with s.acquire(SMOL):
            pass
    assert s.loaded() == [DEFAULT_PAIR, TINY]
    with s.acquire(DEFAULT_PAIR) as d, s.acquire(TINY) as t:
        assert d is default and t is tiny
    assert build.calls == [DEFAULT_PAIR, TINY, SMOL]  # nothing was reloaded


def test_a_pair_in_use_is_dropped_only_when_its_run_ends():
    s = store(Builder())
    with s.acquire(TINY):
        with s.acquire(SMOL):
            assert s.loaded() == [TINY, SMOL]  # both runs still hold their pair
        assert s.loaded() == [TINY, SMOL]
    assert s.loaded() == [SMOL]


def test_memory_check_comes_before_the_load():
    build = Builder()
    s = store(build, free=lambda: 2 * GB)
    with pytest.raises(PairUnavailable, match=r"needs about 8\.4 GB of RAM in fp32, and 2\.0 GB is free"):
        with s.acquire(SMOL):
            pass
    assert build.calls == []
    with s.acquire(TINY):  # small enough
        pass
    with s.acquire(DEFAULT_PAIR):  # the operator's default is loaded as asked
        pass
    assert build.calls == [TINY, DEFAULT_PAIR]


def test_an_idle_extra_makes_room_but_one_in_use_does_not():
    s = store(Builder(), free=lambda: (8 if TINY in s.loaded() else 9) * GB)  # SmolLM2 needs 8.4 GB
    with s.acquire(TINY):
        with pytest.raises(PairUnavailable, match=r"8\.0 GB is free with tiny-random loaded; the pair in use keeps serving"):
            with s.acquire(SMOL):
                pass
    assert s.loaded() == [TINY]  # tiny-random was in use, so it stayed
    with s.acquire(SMOL):
        assert s.loaded() == [SMOL]  # idle now: dropped to make room


def test_unknown_and_hidden_pairs_are_named():
    s = PairStore(Offer(TINY, (TINY,), {BIG: "needs a GPU"}), device="cpu", dtype="fp32", build=Builder())
    with pytest.raises(PairUnavailable, match=r"pair must be one of tiny-random, got 'gpt-9'"):
        with s.acquire("gpt-9"):
            pass
    with pytest.raises(PairUnavailable, match=r"'qwen2.5-coder-7b/0.5b' is not offered here \(needs a GPU\)"):
        with s.acquire(BIG):
            pass
    with pytest.raises(PairUnavailable, match=r"not offered here \(not in SPECDEC_PAIRS\)"):
        with s.acquire(SMOL):
            pass


def test_command_line_cache_keeps_the_old_pair_when_a_load_fails():
    first = load_pair(TINY, device="cpu", dtype="fp32")
    with pytest.raises(ValueError, match="could not load model"):
        load_pair(target="/nonexistent/model-folder", device="cpu", dtype="fp32")
    assert load_pair(TINY, device="cpu", dtype="fp32") is first
