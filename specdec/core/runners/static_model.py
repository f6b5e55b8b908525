"""A causal LM run in fixed shapes over a preallocated cache: the static and compiled runners' model.

Its position (the positions its cache holds) is a host integer: a pass advances it by the real
tokens it fed, a rollback sets it (crop), and the cache is never asked for its length. The ids of a
fixed-shape pass sit in a buffer per shape (`input(n)`), written on the device by whoever runs it,
so nothing goes from Python data to the device while a run steps. Each pass runs `fixed_pass`
(runners/kv.py) as it is, or a captured copy of it (runners/capture.py fills `captured`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import torch

from specdec.core.runners.kv import StaticKV, activation_dtype, fixed_pass
from specdec.core.runners.shapes import LARGEST, bucket

log = logging.getLogger("specdec.runners")
ROUND = 256  # capacities are rounded up to this many positions


class StaticModel:
    """The model, its preallocated cache and its fixed-shape passes, ready for a run (or, captured,
    for one run at a time: claim)."""

    def __init__(self, model, vocab_size: int, linear: Callable[[], contextlib.AbstractContextManager] | None = None,
                 capacity: int | None = None):
        if "sliding_attention" in (getattr(model.config, "layer_types", None) or ()):
            raise ValueError("the static runner needs full attention in every layer; this model has sliding-window layers")
        self.model, self.vocab_size, self.linear = model, vocab_size, linear
        self.device = model.device
        self.kv: StaticKV | None = None
        self.fixed_capacity = capacity  # set: the cache is allocated once at this size (captured passes point into it)
        self.position = 0  # positions held in the cache
        self.start = torch.zeros(1, dtype=torch.long, device=self.device)  # (1,) a pass's first position, on the device
        self.inputs: dict[int, torch.Tensor] = {}  # tokens -> (tokens,) ids buffer of the passes of that shape
        self.captured: dict[tuple[int, bool], Callable[[], torch.Tensor]] = {}  # (tokens, last only) -> captured pass
        self.capture_s: dict[tuple[int, bool], float] = {}  # seconds each captured shape took to capture
        self.capturer = None  # runners/capture.py's Capturer for a compiled model; None: static
        self.owner = None  # the run holding a shared (compiled) model

    @property
    def length(self) -> int:
        return self.position

    def reserve(self, positions: int) -> None:
        """A cache that holds `positions` plus the padding of the largest pass (allocated here,
        before a run's clock; a static model's own size per run, a compiled model's fixed)."""
        need = positions + LARGEST
        if self.kv is not None and self.kv.capacity >= need:
            return
        if self.fixed_capacity is not None and need > self.fixed_capacity:
            raise ValueError(f"a run of {positions} positions does not fit this model's fixed cache of {self.fixed_capacity}")
        capacity = self.fixed_capacity or -(-need // ROUND) * ROUND
        self.kv = StaticKV(self.model.config, capacity, activation_dtype(self.model), self.device)

    def input(self, tokens: int) -> torch.Tensor:
        """The ids buffer of passes over `tokens` tokens: (tokens,) on the device."""
        if tokens not in self.inputs:
            with torch.inference_mode(False):  # written by the runner outside inference mode too
                self.inputs[tokens] = torch.zeros(tokens, dtype=torch.long, device=self.device)
        return self.inputs[tokens]

    @torch.inference_mode()
    def run(self, tokens: int, real: int, last_only: bool) -> torch.Tensor:
        """The pass over input(tokens), of which the first `real` are real, at this model's position
        -> logits (tokens, V), or (1, V) of the last row. The position moves on by `real`."""
        if self.position + tokens > self.kv.capacity:
            raise ValueError(f"pass past the cache: position {self.position} + {tokens} > {self.kv.capacity}")
        self.start.fill_(self.position)  # a kernel with a scalar argument: no copy from the host waits
        captured = self.captured.get((tokens, last_only))
        logits = captured() if captured is not None else self.pass_now(self.input(tokens), last_only)
        self.position += real
        return logits

    def pass_now(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """fixed_pass run as it is (not captured), at `start`."""
        with self.linear() if self.linear else contextlib.nullcontext():
            return fixed_pass(self.model, self.kv, ids, self.start, last_only, self.vocab_size)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """ids: (n,) on the device, after the cached positions -> logits (n, V), or (1, V) if
        last_only (CachedModel's interface: the cost table times passes through it). Fed in the
        fixed shapes, in pieces of at most LARGEST tokens."""
        n = ids.shape[0]
        rows = []
        for begin in range(0, n, LARGEST):
            piece = ids[begin : begin + LARGEST]  # (m,)
            m = piece.shape[0]
            size = bucket(m)
            self.input(size)[:m].copy_(piece)
            last_row = last_only and m == size  # padded, the real last row is not the pass's last: keep every row
            out = self.run(size, m, last_row)
            rows.append(out if last_row else out[:m])
        logits = torch.cat(rows)
        return logits[-1:] if last_only else logits

    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor) -> None:
        """The prompt, in one pass of its own length (outside the fixed shapes), from position 0."""
        self.position = 0
        if ids.numel():
            self.start.fill_(0)
            self.pass_now(ids, last_only=True)
            self.position = ids.shape[0]

    def crop(self, length: int) -> None:
        """Keep the first `length` positions: the rest are overwritten by later passes."""
        self.position = min(self.position, length)

    def claim(self, owner, positions: int, shapes) -> "StaticModel":
        """This model for `owner`'s run of up to `positions` positions, with `shapes` captured if it
        is a compiled one; a static model is the run's own. A compiled model serves one run at a time:
        while another run holds it, or when the run does not fit its cache, the run gets a static
        model of the same weights instead (one logged line says why)."""
        if self.capturer is None:
            self.reserve(positions)
            return self
        reason = self.capturer.claim(self, owner, positions, shapes)
        if reason is None:
            return self
        log.warning("specdec: this run of the compiled runner runs static: %s", reason)
        twin = StaticModel(self.model, self.vocab_size, self.linear)
        twin.reserve(positions)
        return twin

    def release(self, owner) -> None:
        if self.owner is owner:
            self.owner = None
