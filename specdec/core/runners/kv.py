"""A preallocated KV cache, and the one function every fixed-shape pass runs.

transformers' own StaticCache keeps its position in a device tensor that each layer advances as it
writes; rolling it back means a write per layer, and its length is read with get_seq_length(),
which on a GPU waits for the device. Here the position lives on the host (StaticModel.position) and
each pass is told where to write: `positions`, a device tensor the pass computes from a one-element
device buffer filled just before it runs.
"""

from __future__ import annotations

import torch


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


def fixed_pass(model, kv: StaticKV, ids: torch.Tensor, start: torch.Tensor, last_only: bool, vocab_size: int) -> torch.Tensor:
    """ids (n,) fed at positions start, start + 1, ... -> logits (n, V), or (1, V) of the last row.
    start: (1,) on the device. Every shape in here is fixed by ids and the cache: nothing is read
    to the host, so the pass can be captured (CUDA graph) or compiled whole (torch.compile)."""
    positions = start + torch.arange(ids.shape[0], device=ids.device)  # (n,)
    kv.positions = positions
    # A query sees the slots up to its own position; slots past it (padding, rejected drafts) never count.
    mask = (kv.slots[None, :] <= positions[:, None])[None, None]  # (1, 1, n, capacity)
    out = model(input_ids=ids[None], position_ids=positions[None], attention_mask={"full_attention": mask},
                cache=kv, use_cache=True, logits_to_keep=1 if last_only else 0)
    return out.logits[0, :, :vocab_size]


def activation_dtype(model) -> torch.dtype:
    """The dtype the model's layers compute in (the cache's): its embedding of one token. (A
    quantized model's weights may be int8; what comes out of its embedding is not.)"""
    embed = model.get_input_embeddings()
    probe = torch.zeros(1, dtype=torch.long, device=model.device)
    with torch.inference_mode():
        return embed(probe).dtype
