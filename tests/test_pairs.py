"""Pairs on a shared deployment: what is offered, and a store that never takes a pair from under a run."""

import pytest

from specdec.serving import pair_offer, pairs
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
    monkeypatch.setattr(pair_offer, "in_hub_cache", lambda repo: repo.startswith("HuggingFaceTB/"))
    monkeypatch.setattr(pair_offer.bundle, "bundle_available", lambda name: False)
    monkeypatch.setattr(pair_offer.bundle, "is_converted", lambda name: False)
    offer = pairs.offered_pairs({"HF_HUB_OFFLINE": "1", "SPECDEC_PAIR": TINY}, device=pairs.torch.device("cpu"), dtype="fp32")
    assert offer.names == (TINY, SMOL)  # the bundle is gone, SmolLM2 is in the local cache
    assert "offline" in offer.hidden[DEFAULT_PAIR] and offer.hidden[BIG] == "needs a GPU"
    monkeypatch.setattr(pair_offer.bundle, "is_converted", lambda name: True)  # a converted copy needs no packages
    assert DEFAULT_PAIR in pairs.offered_pairs({"HF_HUB_OFFLINE": "1"}, device=pairs.torch.device("cpu")).names


def test_default_offer_online_is_what_fits_the_device(monkeypatch):
    monkeypatch.setattr(pair_offer, "in_hub_cache", lambda repo: False)
    monkeypatch.setattr(pair_offer, "memory", lambda device: (4 * GB, 8 * GB))
    offer = pairs.offered_pairs({"SPECDEC_PAIR": TINY}, device=pairs.torch.device("cpu"), dtype="fp32")
    assert SMOL not in offer.names and "needs about 8.4 GB; the cpu has 8.0 GB" in offer.hidden[SMOL]
    monkeypatch.setattr(pair_offer, "memory", lambda device: (4 * GB, 32 * GB))
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


MID, LARGE = "qwen2.5-coder-14b/0.5b", "qwen2.5-coder-32b/0.5b"
CUDA = pairs.torch.device("cuda")  # a device description: no GPU is asked anything (memory is faked below)


def gpu_of(monkeypatch, gb):
    monkeypatch.setattr(pair_offer, "in_hub_cache", lambda repo: False)
    monkeypatch.setattr(pair_offer, "memory", lambda device: (gb * GB, gb * GB))


@pytest.mark.parametrize("gb, default", [(24, BIG), (40, MID), (48, MID), (80, LARGE), (141, LARGE)])
def test_on_a_gpu_the_default_is_the_largest_pair_that_fits(monkeypatch, gb, default):
    gpu_of(monkeypatch, gb)
    offer = pairs.offered_pairs({}, device=CUDA, dtype="bf16")
    assert offer.default == default and offer.names[0] == default
    assert offer.why_default == f"the largest pair that fits the cuda's {gb:.1f} GB"
    for name, why in offer.hidden.items():  # every larger pair is left out with the memory it needs
        assert pairs.PRESETS[name].params_b > pairs.PRESETS[default].params_b and f"the cuda has {gb:.1f} GB" in why


def test_the_gpu_presets_need_what_their_weights_take():
    for name, weights_gb in ((BIG, 16.2), (MID, 30.4), (LARGE, 66.0)):  # bf16: two bytes per parameter
        need = pair_offer.needed_bytes(pairs.PRESETS[name], pairs.torch.bfloat16, on_gpu=True)
        assert need == pytest.approx(weights_gb * 1e9 + pair_offer.GPU_RUNTIME_BYTES, rel=1e-3)


def test_the_operator_still_chooses_on_a_gpu(monkeypatch):
    gpu_of(monkeypatch, 141)
    offer = pairs.offered_pairs({"SPECDEC_PAIR": BIG}, device=CUDA, dtype="bf16")
    assert offer.default == BIG and offer.why_default == "$SPECDEC_PAIR" and LARGE in offer.names
    listed = pairs.offered_pairs({"SPECDEC_PAIRS": f"{MID},{TINY}"}, device=CUDA, dtype="bf16")
    assert listed.names == (MID, TINY) and listed.why_default == "the first of $SPECDEC_PAIRS"
    cpu = pairs.offered_pairs({"HF_HUB_OFFLINE": "1"}, device=pairs.torch.device("cpu"), dtype="fp32")
    assert cpu.default == DEFAULT_PAIR and cpu.why_default == "the project's default, made for a CPU"
    assert {cpu.hidden[n] for n in (BIG, MID, LARGE)} == {"needs a GPU"}


def test_zerogpu_offers_what_one_call_gets_and_only_what_starts_with_the_app(monkeypatch):
    gpu_of(monkeypatch, 95)  # `spaces` reports the whole card: half of it for a call unless xlarge is asked for
    offer = pairs.offered_pairs({"SPACES_ZERO_GPU": "true"}, device=CUDA, dtype="bf16")
    assert offer.default == MID and offer.names == (MID,) and "a ZeroGPU call (large)'s 47.5 GB" in offer.why_default
    assert "needs about 63.5 GB; a ZeroGPU call (large) has 47.5 GB" in offer.hidden[LARGE]
    assert offer.hidden[BIG] == pair_offer.NOT_LOADED_AT_START  # it fits, but only the pairs placed at start-up serve
    xlarge = pairs.offered_pairs({"SPACES_ZERO_GPU": "true", "SPECDEC_GPU_SIZE": "xlarge"}, device=CUDA, dtype="bf16")
    assert xlarge.default == LARGE and xlarge.names == (LARGE,)
    listed = pairs.offered_pairs({"SPACES_ZERO_GPU": "true", "SPECDEC_PAIRS": f"{BIG},{MID}"}, device=CUDA, dtype="bf16")
    assert listed.names == (BIG, MID)  # the operator's list is placed at start-up whole


def test_the_offer_explains_itself_in_one_line(monkeypatch):
    gpu_of(monkeypatch, 24)
    line = pairs.offered_pairs({}, device=CUDA, dtype="bf16").explain()
    assert line.startswith(f"Default {BIG}: the largest pair that fits the cuda's 24.0 GB. Not offered here: ")
    assert f"{LARGE} (needs about 63.5 GB; the cuda has 24.0 GB, of which a pair may take 90%)" in line and "\n" not in line


def test_a_store_that_does_not_load_on_demand_serves_only_what_it_was_given():
    build = Builder()
    s = PairStore(Offer(TINY, (TINY, SMOL)), device="cpu", dtype="fp32", build=build, loads_on_demand=False)
    pair = object()
    s.adopt(TINY, pair)
    with s.acquire(TINY) as held:
        assert held is pair and s.loaded_pair(TINY) is pair
    with pytest.raises(PairUnavailable, match="was not loaded when the app started; on ZeroGPU"):
        with s.acquire(SMOL):
            pass
    with pytest.raises(PairUnavailable, match=r"pair 'smollm2-1.7b/135m' is not loaded in this process \(loaded: tiny-random\)"):
        s.loaded_pair(SMOL)
    assert build.calls == []


def test_on_a_gpu_the_weights_are_read_straight_onto_it(monkeypatch):
    """from_pretrained gets the GPU as its device_map (transformers then materialises each tensor on
    the device as it reads it: no whole copy in host RAM); on a CPU, and in a ZeroGPU app's process,
    where "cuda" is `spaces`' host-memory stand-in, the weights load on the CPU."""
    import types

    import transformers

    from specdec.models.pair import Loader

    asked = []

    class Model:
        generation_config = types.SimpleNamespace(eos_token_id=2)

        @classmethod
        def from_pretrained(cls, src, **kwargs):
            asked.append(kwargs.get("device_map"))
            return cls()

        def to(self, device):
            return self

        def eval(self):
            return self

    tokenizer = types.SimpleNamespace(eos_token_id=2, get_vocab=lambda: {"a": 0})
    monkeypatch.setattr(transformers, "AutoModelForCausalLM", Model)
    monkeypatch.setattr(transformers, "AutoTokenizer", types.SimpleNamespace(from_pretrained=lambda src, **kw: tokenizer))
    for device, zero, expected in ((CUDA, "", CUDA), (CUDA, "true", None), (pairs.torch.device("cpu"), "", None)):
        monkeypatch.setenv("SPACES_ZERO_GPU", zero)
        asked.clear()
        Loader(device, pairs.torch.bfloat16, spread=False, progress=None).from_sources("p", "t", "d", True, "given ids or folders")
        assert asked == [expected, expected], (device, zero)
    assert Loader(CUDA, pairs.torch.bfloat16, spread=True, progress=None).placement() == {"device_map": "auto"}


def test_a_local_copy_too_big_for_the_gpu_is_not_made_the_default(monkeypatch):
    gpu_of(monkeypatch, 24)
    monkeypatch.setattr(pair_offer, "in_hub_cache", lambda repo: True)  # every preset's repos are in the local cache
    offer = pairs.offered_pairs({"HF_HUB_OFFLINE": "1"}, device=CUDA, dtype="bf16")
    assert LARGE in offer.names and offer.default == BIG  # offered (it loads without a download), but it does not fit
