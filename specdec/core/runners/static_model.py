"""A causal LM run in fixed shapes over a preallocated cache: the static and compiled runners' model.

transformers' own StaticCache keeps its position in a device tensor that each layer advances as it
writes; rolling it back means a write per layer, and its length is read with get_seq_length(),
which on a GPU waits for the device. Here the position is a host integer (StaticModel.position): a
pass advances it by the real tokens it fed, a rollback sets it (crop), and the cache is never asked
its length. Each pass is told where to write: `positions`, computed on the device from a
one-element buffer filled just before it runs.

Every pass runs in one of a few fixed shapes (BUCKETS): a pass over n tokens runs in the smallest
bucket that holds n; the padded rows land past the position and are overwritten by later passes,
never read (the mask stops at the position). The buckets include the cost table's sizes
(specdec.measure.cost_table.SIZES), so a cost table of this runner times exactly the passes a run
makes, and reach 33: a check of K + 1 tokens with K up to MAX_K = 32. The ids of a fixed-shape
pass sit in a buffer per shape (`input(n)`), written on the device, so nothing goes from Python
data to the device while a run steps. Each pass runs `fixed_pass` as it is, or a captured copy of
it (capture.py fills `captured`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from specdec.core.config import MAX_K

BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, MAX_K + 1)
LARGEST = BUCKETS[-1]
DRAFT_SHAPES = ((1, True), (2, True))  # (tokens, last row only): a draft pass, the catch-up after a full accept
ROUND = 256  # capacities are rounded up to this many positions


def bucket(n: int) -> int:
    """The smallest bucket that holds n tokens (1 <= n <= LARGEST)."""
    for size in BUCKETS:
        if n <= size:
            return size
    raise ValueError(f"a fixed-shape pass holds at most {LARGEST} tokens, got {n}")


def target_shapes(config) -> tuple[tuple[int, bool], ...]:
    """The target's passes a run with these settings can make: a check of K + 1 tokens for every K
    up to the longest the K policy may ask for (shorter ones too: the last step of a run drafts
    only what max_new_tokens leaves room for), all rows kept."""
    if not config.drafts:
        longest = 0
    elif config.k_policy == "fixed":
        longest = config.k
    else:
        longest = max(config.k, config.k_max)
    top = bucket(longest + 1)
    return tuple((size, False) for size in BUCKETS if size <= top)


class StaticKV:
    """Keys and values of every layer, each (1, kv_heads, capacity, head_dim), allocated once.

    transformers' attention calls update(keys, values, layer_idx) with the pass's new keys and
    values; they are written at `positions` (set by fixed_pass before the model runs) and the whole
    buffers are returned: the attention mask decides which slots count."""

    is_compileable = True  # read by transformers: a cache of fixed shapes

    def __init__(self, config, capacity: int, dtype: torch.dtype, device: torch.device):
        heads = config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (1, heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]
        self.slots = torch.arange(capacity, device=device)  # (capacity,) every slot's position
        self.capacity = capacity
        self.positions: torch.Tensor | None = None  # (n,) where the running pass writes

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys.index_copy_(2, self.positions, key_states)  # key_states: (1, kv_heads, n, head_dim)
        values.index_copy_(2, self.positions, value_states)
        return keys, values


def fixed_pass(model, kv: StaticKV, ids: torch.Tensor, start: torch.Tensor, last_only: bool,
               vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (n,) fed at positions start, start + 1, ... -> (logits (n, V), or (1, V) of the last row;
    the final hidden states (n, H)). start: (1,) on the device. Every shape in here is fixed by ids
    and the cache: nothing is read to the host, so the pass can be captured (CUDA graph) or
    compiled whole (torch.compile)."""
    positions = start + torch.arange(ids.shape[0], device=ids.device)  # (n,)
    kv.positions = positions
    # A query sees the slots up to its own position; slots past it (padding, rejected drafts) never count.
    mask = (kv.slots[None, :] <= positions[:, None])[None, None]  # (1, 1, n, capacity)
    hidden = model.get_decoder()(input_ids=ids[None], position_ids=positions[None], attention_mask={"full_attention": mask},
                                 cache=kv, use_cache=True).last_hidden_state  # (1, n, H)
    logits = model.get_output_embeddings()(hidden[:, -1:] if last_only else hidden)  # (1, n or 1, V)
    return logits[0, :, :vocab_size], hidden[0]


def activation_dtype(model) -> torch.dtype:
    """The dtype the model's layers compute in (the cache's): its embedding of one token. (A
    quantized model's weights may be int8; what comes out of its embedding is not.)"""
    embed = model.get_input_embeddings()
    probe = torch.zeros(1, dtype=torch.long, device=model.device)
    with torch.inference_mode():
        return embed(probe).dtype


class StaticModel:
    """The model, its preallocated cache and its fixed-shape passes, ready for a run."""

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
        self.captured: dict[tuple[int, bool], Callable[[], tuple]] = {}  # (tokens, last only) -> captured pass
        self.capture_s: dict[tuple[int, bool], float] = {}  # seconds each captured shape took to capture
        self.features: torch.Tensor | None = None  # (n, H) the last pass's final hidden states

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
        logits, self.features = captured() if captured is not None else self.pass_now(self.input(tokens), last_only)
        self.position += real
        return logits

    def pass_now(self, ids: torch.Tensor, last_only: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """fixed_pass run as it is (not captured), at `start`."""
        with self.linear() if self.linear else contextlib.nullcontext():
            return fixed_pass(self.model, self.kv, ids, self.start, last_only, self.vocab_size)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """ids: (n,) on the device, after the cached positions -> logits (n, V), or (1, V) if
        last_only. Fed in the fixed shapes, in pieces of at most LARGEST tokens."""
        n = ids.shape[0]
        if n <= LARGEST:  # one piece: every pass of a run's steps
            return self._piece(ids, last_only)
        rows, features = [], []
        for begin in range(0, n, LARGEST):  # a long catch-up (a draft model after many lookup steps)
            rows.append(self._piece(ids[begin : begin + LARGEST], last_only))
            features.append(self.features)
        self.features = torch.cat(features)
        logits = torch.cat(rows)
        return logits[-1:] if last_only else logits

    def _piece(self, piece: torch.Tensor, last_only: bool) -> torch.Tensor:
        """One fixed-shape pass over piece (m,), m <= LARGEST: its rows, or its last row."""
        m = piece.shape[0]
        size = bucket(m)
        self.input(size)[:m].copy_(piece)
        last_row = last_only and m == size  # padded, the real last row is not the pass's last: keep every row
        out = self.run(size, m, last_row)
        self.features = self.features[:m]
        return out if last_row else out[m - 1 : m] if last_only else out[:m]

    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor) -> None:
        """The prompt, in one pass of its own length (outside the fixed shapes), from position 0."""
        self.position = 0
        if ids.numel():
            self.start.fill_(0)
            _, self.features = self.pass_now(ids, last_only=True)
            self.position = ids.shape[0]

    def crop(self, length: int) -> None:
        """Keep the first `length` positions: the rest are overwritten by later passes."""
        self.position = min(self.position, length)


class StaticModels:
    """The static runner's lender: every run gets a StaticModel of its own, its cache sized for it."""

    def __init__(self, module, vocab_size: int, linear=None):
        self.module, self.vocab_size, self.linear = module, vocab_size, linear

    def claim(self, owner, positions: int, shapes=()) -> StaticModel:
        model = StaticModel(self.module, self.vocab_size, self.linear)
        model.reserve(positions)
        return model

    @property
    def capture_s(self) -> dict:
        return {}  # nothing is captured

    def release(self, owner) -> None:
        pass  # the run's StaticModel goes with the run
