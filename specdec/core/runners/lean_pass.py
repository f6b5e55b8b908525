"""A decoder pass that runs transformers' own ops in transformers' order, without the Python around them.

Why: a one-token pass of the 1.5B target spent 10 to 17 ms outside its products (`passes
--without-products`), 13 to 22% of a decode step, and the 0.5B draft a third of its pass. Most of
it is not arithmetic. Each layer's call goes through keyword plumbing and decorators. The cache
grows by concatenation, so every pass copies every layer's keys and values again. A mask is drawn
for every pass. Here the same modules run the same ops on the same tensors, so a pass gives the
same bits as transformers' (tests/test_lean_pass.py). Five things are left out or done once:
- the calls' wrappers: each layer's norms, projections and MLP are called directly, in the order
  Qwen2DecoderLayer / LlamaDecoderLayer call them;
- half the rotary embedding's ops: `rotate` runs apply_rotary_pos_emb's ops on the query and key
  heads side by side, once, where transformers runs them on each (about 50 against 75 to 87 us
  a layer, timed alone on a busy 2-core Xeon);
- the concatenation: keys and values sit in buffers allocated ahead (KeyValues), written in place,
  and each pass's attention reads the valid slots as a view;
- the mask: an attention function marked CAUSAL (every path of specdec/kernels/attention.py) draws
  the causal pattern of a pass over a cache itself when it gets none (the rows' kernel reads
  exactly the keys a row may see);
- up to three of a layer's seven product calls: where the kernel offers it, the query, key and value
  projections run as one call and the gate and up projections as another (joined_products), whose
  outputs are the parts' side by side, bit for bit.

Where a model is not of that shape (another architecture, a sliding window, attention not marked
CAUSAL), `supports` says no and the eager runner keeps transformers' path. transformers is imported
where it is used, so that the attention paths can import CAUSAL without it.
"""

from __future__ import annotations

import torch

import specdec.core.runners.joined_products as joined_products

CAUSAL = "specdec_draws_causal"  # an attention function's attribute: given no mask, it draws the causal pattern of a pass over a cache
LAYERS = ("Qwen2DecoderLayer", "LlamaDecoderLayer")  # the same ops in the same order (Llama's projections may lack biases: the modules say)
GROWTH = 256  # a cache grows by at least this many positions when it is full


def supports(model) -> bool:
    """Whether `decoder_pass` runs this causal LM's decoder with the ops transformers would: a stack
    of LAYERS with full attention, on one of the library's attention paths."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    config = getattr(model, "config", None)
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if config is None or decoder is None or not getattr(ALL_ATTENTION_FUNCTIONS.get(config._attn_implementation), CAUSAL, False):
        return False
    if not all(hasattr(decoder, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return False
    return all(type(layer).__name__ in LAYERS and getattr(layer.self_attn, "sliding_window", None) is None
               for layer in decoder.layers)


class KeyValues:
    """Every layer's keys and values, each (1, kv_heads, capacity, head_dim), allocated at the first
    write and grown (copied once into larger buffers) when a pass would overflow them. `length` is a
    host integer: the positions that hold keys; a rollback sets it, and later passes overwrite the
    slots past it."""

    def __init__(self, layers: int, capacity: int = GROWTH):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.capacity = capacity
        self.length = 0

    def reserve(self, end: int) -> None:
        """Room for positions up to `end`: buffers already allocated are copied into larger ones."""
        if end <= self.capacity:
            return
        self.capacity = max(end, self.capacity * 2) + GROWTH
        for store in (self.keys, self.values):
            for i, old in enumerate(store):
                if old is not None:
                    store[i] = self._buffer(old)
                    store[i][:, :, : self.length] = old[:, :, : self.length]

    def _buffer(self, like: torch.Tensor) -> torch.Tensor:
        """(1, kv_heads, capacity, head_dim) zeros of like's (1, kv_heads, any, head_dim) dtype and device."""
        return like.new_zeros(*like.shape[:2], self.capacity, like.shape[3])

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """keys, values (1, kv_heads, n, head_dim) of positions length .. length + n - 1 -> every
        valid slot's keys and values, views (1, kv_heads, length + n, head_dim)."""
        start, end = self.length, self.length + keys.shape[2]
        for store, new in ((self.keys, keys), (self.values, values)):
            if store[layer] is None:
                store[layer] = self._buffer(new)
            store[layer][:, :, start:end] = new
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


def rotate(qk: torch.Tensor, heads: int, cos: torch.Tensor, sin: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """qk (1, n, (heads + kv_heads) * head_dim): the query projection's output and the key's side by
    side (joined, or concatenated), cos and sin (1, n, head_dim) -> query (1, heads, n, head_dim) and
    key (1, kv_heads, n, head_dim), rotated as apply_rotary_pos_emb rotates them, op for op on every
    element: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] for the halves x1, x2 of each head."""
    n, half = qk.shape[1], head_dim // 2
    x = qk.view(1, n, -1, head_dim)  # (1, n, heads + kv_heads, head_dim)
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    x = x * cos[:, :, None] + turned * sin[:, :, None]
    return x[:, :, :heads].transpose(1, 2), x[:, :, heads:].transpose(1, 2)


def decoder_pass(decoder, ids: torch.Tensor, cache: KeyValues) -> torch.Tensor:
    """ids (1, n): the tokens after the cache's positions -> the final norm's hidden states
    (1, n, H); the cache then holds their keys and values too."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    n, start = ids.shape[1], cache.length
    cache.reserve(start + n)
    hidden = decoder.embed_tokens(ids)  # (1, n, H)
    positions = torch.arange(start, start + n, device=ids.device)[None]  # (1, n)
    cos, sin = decoder.rotary_emb(hidden, positions)  # (1, n, head_dim) each
    attend = ALL_ATTENTION_FUNCTIONS[decoder.config._attn_implementation]  # as transformers looks it up
    for index, (layer, joined) in enumerate(zip(decoder.layers, joined_products.plan(decoder))):
        attention, mlp, head_dim = layer.self_attn, layer.mlp, layer.self_attn.head_dim
        x = layer.input_layernorm(hidden)
        if joined.qkv is None:
            qk, value = torch.cat((attention.q_proj(x), attention.k_proj(x)), dim=-1), attention.v_proj(x)
        else:
            both = joined.qkv(x)  # (1, n, query + key [+ value] columns)
            qk = both[..., : joined.query + joined.key]
            value = both[..., joined.query + joined.key :] if joined.with_value else attention.v_proj(x)
        query, key = rotate(qk, joined.query // head_dim, cos, sin, head_dim)  # (1, heads or kv_heads, n, head_dim)
        value = value.view(1, n, -1, head_dim).transpose(1, 2)  # (1, kv_heads, n, head_dim)
        keys, values = cache.write(index, key, value)
        out, _ = attend(attention, query, keys, values, None, dropout=0.0, scaling=attention.scaling)  # (1, n, heads, head_dim)
        hidden = hidden + attention.o_proj(out.reshape(1, n, -1).contiguous())
        x = layer.post_attention_layernorm(hidden)
        if joined.gate_up is None:
            gate, up = mlp.gate_proj(x), mlp.up_proj(x)
        else:
            both = joined.gate_up(x)  # (1, n, gate + up columns)
            gate, up = both[..., : joined.gate], both[..., joined.gate :]
        hidden = hidden + mlp.down_proj(mlp.act_fn(gate) * up)
    cache.length = start + n
    return decoder.norm(hidden)
