"""Model pairs on a shared deployment: a store that loads the offered presets (serving.pair_offer
says which) without ever taking away the pair someone is using.

A public Space serves many visitors from one process. The store keeps the default pair for good and
at most one extra pair beside it: an extra pair is loaded only if it fits in free memory, the old
extra is dropped only once the new one has loaded and no run is using the old one, and a failed
load changes nothing.
"""

from __future__ import annotations

import gc
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from specdec.models import machine
from specdec.models.bundle_chunks import BundleError
from specdec.models.dtypes import dtype_name
from specdec.models.pair import ModelPair, Progress, build_pair, pick_device, pick_dtype
from specdec.models.presets import PRESETS, get_preset
from specdec.serving import torch_thread
from specdec.serving.pair_offer import (GB, PAIRS_ENV, Offer, default_pair, listed_pairs,  # noqa: F401 (the store's callers read them here)
                                        memory, needed_bytes, offered_pairs)



class PairUnavailable(ValueError):
    """A pair cannot serve here; the message says why and what to do. The store is unchanged."""


Builder = Callable[..., ModelPair]


class PairStore:
    """The pairs of one process: the default for good, and at most one extra beside it.

    `acquire(name)` hands out a loaded pair for the length of a run and counts it as in use. Loading
    happens one at a time; the memory check comes first, and a failed load leaves every loaded pair
    as it was. The extra pair that a new one replaces is dropped once no run holds it."""

    def __init__(self, offer: Offer, *, device: str | None = None, dtype: str | None = None,
                 build: Builder = build_pair, free_memory: Callable[[], int | None] | None = None,
                 loads_on_demand: bool = True):
        self.offer = offer
        self.loads_on_demand = loads_on_demand  # False on ZeroGPU: pairs are placed on the GPU at start-up only
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

    @property
    def pair_dtype(self) -> torch.dtype:
        """The precision every pair of this store is loaded in."""
        return self._dtype

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

    def loaded_pair(self, name: str) -> ModelPair:
        """The pair `name` as already loaded, never loading it: what a ZeroGPU worker, forked from
        this process, finds. No lock is taken (one held by another thread at the fork would never be
        released in the child); reading one dict entry is atomic."""
        pair = self._pairs.get(name)
        if pair is None:
            raise PairUnavailable(f"pair {name!r} is not loaded in this process (loaded: {', '.join(self._pairs) or 'none'})")
        return pair

    def adopt(self, name: str, pair: ModelPair) -> None:
        """Keep a pair loaded elsewhere (the ZeroGPU start-up, in the main thread) as if `get` had loaded it."""
        with self._state:
            self._pairs[name] = pair

    def get(self, name: str, progress: Progress | None = None, *, hold: bool = False) -> ModelPair:
        """The loaded pair `name`, loading it when absent and this store loads on demand."""
        with self._state:
            if name in self._pairs:
                self._in_use[name] += hold
                return self._pairs[name]
        if not self.loads_on_demand:
            raise PairUnavailable(f"pair {name!r} was not loaded when the app started; on ZeroGPU pairs are placed on "
                                  f"the GPU at start-up only (name it in {PAIRS_ENV})")
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
        need = needed_bytes(get_preset(name), self._dtype, self._device.type == "cuda")
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
    """The process's store, built from the environment on first use (the app and its GPU worker share it).
    Once built it is returned without the lock, which a ZeroGPU worker may inherit held by a thread
    the fork did not keep."""
    global _shared
    if _shared is not None:
        return _shared
    with _shared_lock:
        if _shared is None:
            _shared = PairStore(offered_pairs(), loads_on_demand=not machine.zero_gpu())
        return _shared
