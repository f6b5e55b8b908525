"""Model pairs on a shared deployment: which presets visitors may pick, and a store that loads them
without ever taking away the pair someone is using.

A public Space serves many visitors from one process. The operator lists the presets on offer
($SPECDEC_PAIRS); by default they are the ones this machine can load without a download, plus the
Hub presets that fit the device when it is online. The store keeps the default pair for good and
at most one extra pair beside it: an extra pair is loaded only if it fits in free memory, the old
extra is dropped only once the new one has loaded and no run is using the old one, and a failed
load changes nothing.
"""

from __future__ import annotations

import gc
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from specdec.models import bundle
from specdec.models.bundle_chunks import BundleError
from specdec.serving import torch_thread
from specdec.models.presets import DEFAULT_PAIR, PRESETS, PairPreset, get_preset
from specdec.models.dtypes import dtype_name
from specdec.models.pair import ModelPair, Progress, build_pair, pick_device, pick_dtype

PAIRS_ENV = "SPECDEC_PAIRS"  # comma-separated preset names visitors may pick
PAIR_ENV = "SPECDEC_PAIR"  # the default preset
GB = 1 << 30
# Resident bytes per weight byte, with room to spare: the whole app with the embedded pair (4.5 GiB of
# bf16 weights) measured 4.6-4.7 GiB resident over 30 runs (docs/reliability.md).
LOAD_FACTOR = 1.15
RUNTIME_BYTES = GB // 2  # KV caches and activations of one run at the longest context, rounded up
FIT_SHARE = 0.8  # a Hub preset is offered when it needs at most this share of the device's memory


class PairUnavailable(ValueError):
    """A pair cannot serve here; the message says why and what to do. The store is unchanged."""


def listed_pairs(environ=os.environ) -> list[str] | None:
    """$SPECDEC_PAIRS as preset names (None when unset); ValueError naming the unknown entries."""
    raw = environ.get(PAIRS_ENV, "").strip()
    if not raw:
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        raise ValueError(f"{PAIRS_ENV} names unknown presets {', '.join(map(repr, unknown))}; known: {', '.join(PRESETS)}")
    return list(dict.fromkeys(names))


def default_pair(environ=os.environ) -> str:
    """$SPECDEC_PAIR, else the first entry of $SPECDEC_PAIRS, else the project default."""
    name = environ.get(PAIR_ENV, "").strip()
    if name:
        get_preset(name)  # ValueError naming the field for an unknown name
        return name
    listed = listed_pairs(environ)
    return listed[0] if listed else DEFAULT_PAIR


def is_online(environ=os.environ) -> bool:
    return environ.get("HF_HUB_OFFLINE", "").strip().upper() not in ("1", "ON", "YES", "TRUE")


def in_hub_cache(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds the repo's config and weights (no network)."""
    from huggingface_hub import try_to_load_from_cache

    def cached(filename: str) -> bool:
        return isinstance(try_to_load_from_cache(repo_id, filename), str)

    return cached("config.json") and (cached("model.safetensors") or cached("model.safetensors.index.json"))


def loads_without_download(preset: PairPreset) -> bool:
    """Built in code, the embedded bundle (installed or already converted), or both models in the local cache."""
    if preset.name == "tiny-random":
        return True
    if preset.bundle and (bundle.bundle_available(preset.bundle) or bundle.is_converted(preset.bundle)):
        return True
    return in_hub_cache(preset.target_id) and in_hub_cache(preset.draft_id)


def needed_bytes(preset: PairPreset, dtype: torch.dtype) -> int:
    """Memory a loaded pair takes: its weights in `dtype`, with slack, plus one run's caches."""
    if preset.name == "tiny-random":
        return 64 << 20
    weight_bytes = preset.params_b * 1e9 * torch.finfo(dtype).bits / 8
    return int(weight_bytes * LOAD_FACTOR) + RUNTIME_BYTES


def memory(device: torch.device) -> tuple[int | None, int | None]:
    """(free, total) bytes of the device's memory, None where they cannot be read."""
    try:
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            return int(free), int(total)
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)
    except Exception:  # e.g. a ZeroGPU main process, where CUDA is only emulated until a GPU call
        return None, None


@dataclass(frozen=True)
class Offer:
    default: str
    names: tuple[str, ...]  # what the dropdown lists, the default first
    hidden: dict[str, str] = field(default_factory=dict)  # preset -> why it is not offered


def offered_pairs(environ=os.environ, device: torch.device | None = None, dtype: str | None = None) -> Offer:
    """The presets visitors may pick on this machine; ValueError for an unknown name in the environment."""
    device = device or pick_device()
    dt = pick_dtype(device, dtype)
    default = default_pair(environ)
    listed = listed_pairs(environ)
    _, total = memory(device) if listed is None else (None, None)

    def why_hidden(preset: PairPreset) -> str | None:
        if preset.name == default:
            return None  # the operator's choice stands
        if preset.needs_gpu and device.type != "cuda":
            return "needs a GPU"
        if listed is not None or loads_without_download(preset):
            return None
        if not is_online(environ):
            return "not on this machine, and the Hub is offline"
        need = needed_bytes(preset, dt)
        if total is not None and need > FIT_SHARE * total:
            return f"needs about {need / GB:.1f} GB; the {device.type} has {total / GB:.1f} GB"
        return None

    candidates = [PRESETS[n] for n in listed] if listed is not None else list(PRESETS.values())
    hidden = {p.name: why for p in candidates if (why := why_hidden(p))}
    names = [default] + [p.name for p in candidates if p.name not in hidden and p.name != default]
    return Offer(default, tuple(names), hidden)


Builder = Callable[..., ModelPair]


class PairStore:
    """The pairs of one process: the default for good, and at most one extra beside it.

    `acquire(name)` hands out a loaded pair for the length of a run and counts it as in use. Loading
    happens one at a time; the memory check comes first, and a failed load leaves every loaded pair
    as it was. The extra pair that a new one replaces is dropped once no run holds it."""

    def __init__(self, offer: Offer, *, device: str | None = None, dtype: str | None = None,
                 build: Builder = build_pair, free_memory: Callable[[], int | None] | None = None):
        self.offer = offer
        self.device, self.dtype = device, dtype
        self._device = pick_device(device)
        self._dtype = pick_dtype(self._device, dtype)
        self._build = build
        self._free_memory = free_memory or (lambda: memory(self._device)[0])
        self._pairs: dict[str, ModelPair] = {}
        self._in_use: Counter[str] = Counter()
        self._retiring: set[str] = set()  # replaced extras, dropped when their last run ends
        self._state = threading.Lock()  # guards the three fields above
        self._loading = threading.Lock()  # one load at a time

    @property
    def default(self) -> str:
        return self.offer.default

    def loaded(self) -> list[str]:
        with self._state:
            return list(self._pairs)

    def check_offered(self, name) -> str:
        """`name` when visitors may pick it; PairUnavailable naming the field otherwise."""
        if not isinstance(name, str) or name not in self.offer.names:
            if isinstance(name, str) and name in PRESETS:
                why = self.offer.hidden.get(name, f"not in {PAIRS_ENV}")
                raise PairUnavailable(f"pair {name!r} is not offered here ({why}); choose one of {', '.join(self.offer.names)}")
            raise PairUnavailable(f"pair must be one of {', '.join(self.offer.names)}, got {name!r}")
        return name

    @contextmanager
    def acquire(self, name: str, progress: Progress | None = None) -> Iterator[ModelPair]:
        """The loaded pair `name` (loading it first if needed), held as in use until the block ends."""
        pair = self.get(self.check_offered(name), progress, hold=True)
        try:
            yield pair
        finally:
            self._release(name)

    def get(self, name: str, progress: Progress | None = None, *, hold: bool = False) -> ModelPair:
        """The loaded pair `name`, loading it when absent (e.g. in a ZeroGPU worker forked before the load)."""
        with self._state:
            if name in self._pairs:
                self._in_use[name] += hold
                return self._pairs[name]
        with self._loading:
            with self._state:
                if name in self._pairs:  # another visitor loaded it while this one waited
                    self._in_use[name] += hold
                    return self._pairs[name]
            if name != self.default:  # the operator's own choice is loaded as asked; extras must fit
                self._make_room(name)
            try:
                # On the torch thread: a load run here would give this thread a second OpenMP team (torch_thread).
                pair = torch_thread.call(self._build, name, device=self.device, dtype=self.dtype, progress=progress)
            except PairUnavailable:
                raise
            except Exception as err:  # any failure to load is a message for the visitor, not a crash
                reason = describe(err)
                raise PairUnavailable(reason if reason.startswith("could not load") else f"could not load pair {name!r}: {reason}") from err
            with self._state:
                self._pairs[name] = pair
                self._in_use[name] += hold
                for other in [n for n in self._pairs if n not in (name, self.default)]:
                    self._retire(other)
            return pair

    def _release(self, name: str) -> None:
        with self._state:
            self._in_use[name] -= 1
            if name in self._retiring and self._in_use[name] <= 0:
                self._drop(name)

    def _retire(self, name: str) -> None:
        """Drop an extra pair now if idle, else when its last run ends. Caller holds _state."""
        if self._in_use[name] > 0:
            self._retiring.add(name)
        else:
            self._drop(name)

    def _drop(self, name: str) -> None:
        self._pairs.pop(name, None)
        self._retiring.discard(name)
        self._in_use.pop(name, None)
        gc.collect()
        if self._device.type == "cuda":
            torch.cuda.empty_cache()

    def _make_room(self, name: str) -> None:
        """PairUnavailable unless the pair fits in free memory. An idle extra pair is dropped first
        only when the new one would not fit beside it (the default is never dropped)."""
        need = needed_bytes(get_preset(name), self._dtype)
        free = self._free_memory()
        if free is None or need <= free:
            return
        with self._state:
            idle = [n for n in self._pairs if n != self.default and self._in_use[n] <= 0]
            for other in idle:
                self._drop(other)
        free = self._free_memory() if idle else free
        if free is not None and need > free:
            where = "GPU" if self._device.type == "cuda" else "RAM"
            dtype = dtype_name(self._dtype)
            raise PairUnavailable(
                f"pair {name!r} needs about {need / GB:.1f} GB of {where} in {dtype}, and {free / GB:.1f} GB is free "
                f"with {', '.join(self.loaded()) or 'nothing'} loaded; the pair in use keeps serving"
            )


def describe(err: BaseException) -> str:
    """A one-line reason: our own errors as they are, others with their type and first line."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if isinstance(err, (ValueError, BundleError)):
        return text or type(err).__name__
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


_shared: PairStore | None = None
_shared_lock = threading.Lock()


def shared_store() -> PairStore:
    """The process's store, built from the environment on first use (the app and its GPU worker share it)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = PairStore(offered_pairs())
        return _shared
