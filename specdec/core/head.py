"""A draft head that reads the target (EAGLE style): one decoder layer over the target's own features.

The target's feature at position t is its last hidden state after its final norm, f_t (H,), the
row its lm_head turns into the distribution of token t+1. The head takes the pair
(f_t, embedding of token t+1), the embedding from the target's own (frozen) table, and predicts
f_{t+1}:

    x = fc([norm(f_t) ; norm(e(x_{t+1}))])   (2H -> H; each half normalised: the embedding's rows are
                                          about 200x smaller than the features, EAGLE-3 normalises both)
    x = x + attention(norm_1(x))          the target's head counts and rotary, over the head's own cache
    x = x + mlp(norm_2(x))                an MLP narrower than the target's
    f'_{t+1} = norm(x)                    in the target's post-norm space: lm_head(f') is a draft distribution

Drafting K tokens is one `extend` with the real features the target's last check produced, then
K-1 `step`s, each on the head's own predicted feature and the token it drafted. The head has one
layer, so a position's output is never an input to another position: `extend` computes keys and
values for every pair it is given, and the query, attention and MLP for the last one only.

This module is the runtime (pure torch). The stored file is specdec/kernels/head_store.py's,
training is specdec/train/'s.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class HeadShape:
    """The head's dimensions: the target's, apart from the MLP's width."""

    hidden: int  # H, the target's width (its features and embeddings)
    heads: int  # query heads, as the target's layers have
    kv_heads: int  # key/value heads, as the target's
    head_dim: int
    intermediate: int  # the MLP's width (the target's own is far wider: chosen by measurement)
    rope_theta: float  # the target's rotary base
    eps: float  # the target's RMSNorm epsilon

    @classmethod
    def of_target(cls, config, intermediate: int) -> "HeadShape":
        """From a transformers Qwen2-style config (rope_parameters in transformers 5, rope_theta before)."""
        rope = getattr(config, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(config.hidden_size, config.num_attention_heads, config.num_key_value_heads, head_dim,
                   intermediate, float(theta), float(config.rms_norm_eps))

    def as_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    """Qwen2's RMSNorm: normalised in float32, scaled in the input's dtype."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding as Qwen2 applies it: x (..., T, d), cos and sin (T, d)."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + turned * sin


class HeadWeights(nn.Module):
    """The head's parameters and its arithmetic, apart from attention (whose mask differs between
    drafting, here, and training, in specdec/train/). Layer names follow transformers' Qwen2 layer,
    so the target's last layer can be copied in as a starting point."""

    def __init__(self, shape: HeadShape):
        super().__init__()
        h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        self.shape = shape
        self.feature_norm, self.embed_norm = RMSNorm(h, shape.eps), RMSNorm(h, shape.eps)
        self.fc = nn.Linear(2 * h, h, bias=True)
        self.input_layernorm = RMSNorm(h, shape.eps)
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(h, q), nn.Linear(h, kv), nn.Linear(h, kv)
        self.o_proj = nn.Linear(q, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h, shape.eps)
        self.gate_proj = nn.Linear(h, shape.intermediate, bias=False)
        self.up_proj = nn.Linear(h, shape.intermediate, bias=False)
        self.down_proj = nn.Linear(shape.intermediate, h, bias=False)
        self.norm = RMSNorm(h, shape.eps)
        self.register_buffer("inv_freq", self.rotary_frequencies(shape), persistent=False)  # computed, never stored

    @staticmethod
    def rotary_frequencies(shape: HeadShape) -> torch.Tensor:
        """(head_dim / 2,) the rotary frequencies of the target's default rope."""
        return 1.0 / shape.rope_theta ** (torch.arange(0, shape.head_dim, 2, dtype=torch.float32) / shape.head_dim)

    @property
    def dtype(self) -> torch.dtype:
        return self.norm.weight.dtype  # a norm stays a float tensor whatever kernel runs the linear layers

    def rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (T,) -> cos, sin (T, head_dim)."""
        angles = positions.to(self.inv_freq.device, torch.float32)[:, None] * self.inv_freq[None]  # (T, d/2)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def inputs(self, features: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """features, embeds (..., T, H) -> the layer's input x (..., T, H)."""
        return self.fc(torch.cat([self.feature_norm(features), self.embed_norm(embeds)], dim=-1))

    def keys_values(self, normed: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """normed (..., T, H) -> k, v (..., kv_heads, T, head_dim), k rotated."""
        s = self.shape
        k = self.k_proj(normed).unflatten(-1, (s.kv_heads, s.head_dim)).transpose(-3, -2)
        v = self.v_proj(normed).unflatten(-1, (s.kv_heads, s.head_dim)).transpose(-3, -2)
        return rotate(k, cos, sin), v

    def queries(self, normed: torch.Tensor, cos, sin) -> torch.Tensor:
        """normed (..., T, H) -> q (..., heads, T, head_dim), rotated."""
        s = self.shape
        return rotate(self.q_proj(normed).unflatten(-1, (s.heads, s.head_dim)).transpose(-3, -2), cos, sin)

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """x: the layer's input (..., T, H); attended (..., heads, T, head_dim) -> the predicted feature (..., T, H)."""
        x = x + self.o_proj(attended.transpose(-3, -2).flatten(-2))
        mlp_in = self.post_attention_layernorm(x)
        x = x + self.down_proj(F.silu(self.gate_proj(mlp_in)) * self.up_proj(mlp_in))
        return self.norm(x)


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One query row per head over every cached key: q (heads, 1, d), k and v (kv, L, d) -> (heads, 1, d).
    Each key/value head's query heads are stacked as rows of one product (as specdec/kernels/attention.py
    does for the target: torch's grouped-query path is slow on a CPU for one query)."""
    kv = k.shape[0]
    stacked = q.reshape(kv, -1, q.shape[-1])  # (kv, group, d): query head g * group + r is row r of group g
    return F.scaled_dot_product_attention(stacked, k, v).reshape(q.shape)


Logits = Callable[[torch.Tensor], torch.Tensor]  # features (n, H) -> logits (n, V)

_subset_rows: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()  # lm_head -> {ids key: rows}


def subset_logits(lm_head: Logits, ids: torch.Tensor | None, vocab: int | None = None) -> Logits:
    """The target's lm_head restricted to the token ids `ids` (sorted; None: every token): rows
    outside get -inf, so argmax and softmax downstream see a full-width row whose q is zero there.
    A dense nn.Linear is sliced once (kept while that lm_head lives); anything else is computed in
    full and masked."""
    if ids is None:
        return lm_head
    weight = getattr(lm_head, "weight", None)
    if isinstance(lm_head, nn.Linear) and weight is not None and lm_head.bias is None:
        vocab = vocab or weight.shape[0]
        kept = _subset_rows.setdefault(lm_head, {})
        key = (weight.data_ptr(), ids.numel(), int(ids.sum()), int(ids[:64].sum()))
        if key not in kept:
            kept.clear()
            kept[key] = weight.detach()[ids.to(weight.device)].contiguous()  # (N, H)
        rows, where = kept[key], ids.to(weight.device)

        def sliced(features: torch.Tensor) -> torch.Tensor:
            sub = features.to(rows.dtype) @ rows.T  # (n, N)
            return sub.new_full((sub.shape[0], vocab), float("-inf")).index_copy_(1, where, sub)

        return sliced

    def masked(features: torch.Tensor) -> torch.Tensor:
        full = lm_head(features)  # (n, V)
        keep = torch.zeros(full.shape[-1], dtype=torch.bool, device=full.device)
        keep[ids.to(full.device)] = True
        return full.masked_fill(~keep, float("-inf"))

    return masked


class HeadRun:
    """The head for one run: its weights, the target's embedding and lm_head, and its own KV cache.

    Position t of the cache holds the pair (f_t, token t+1). `extend` appends real pairs, `step`
    one drafted pair; `crop` drops the drafted ones again before the next real features arrive."""

    def __init__(self, head: HeadWeights, embed: Callable[[torch.Tensor], torch.Tensor], lm_head: Logits,
                 subset: torch.Tensor | None = None, device: torch.device | str | None = None, capacity: int = 512):
        self.head, self.embed = head, embed
        self.device = torch.device(device) if device is not None else head.norm.weight.device
        self.lm_head = subset_logits(lm_head, subset)
        s = head.shape
        self.k = torch.empty(s.kv_heads, capacity, s.head_dim, dtype=head.dtype, device=self.device)  # (kv, cap, d)
        self.v = torch.empty_like(self.k)
        self._length = 0
        self.feature_dtype: torch.dtype | None = None  # the target's, seen on the first extend: logits get it back

    @property
    def length(self) -> int:
        """Positions held in the head's cache."""
        return self._length

    def crop(self, n: int) -> None:
        """Keep the first n positions."""
        if not 0 <= n:
            raise ValueError(f"crop needs a length >= 0, got {n}")
        self._length = min(self._length, n)

    def _room(self, more: int) -> None:
        need = self._length + more
        if need > self.k.shape[1]:
            grown = max(need, 2 * self.k.shape[1])
            for name in ("k", "v"):
                old = getattr(self, name)
                new = old.new_empty(old.shape[0], grown, old.shape[2])
                new[:, : self._length] = old[:, : self._length]
                setattr(self, name, new)

    @torch.inference_mode()
    def extend(self, features: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        """features (m, H): f_t for the next m positions; next_ids (m,): token t+1 of each ->
        the predicted feature after the last pair, (1, H)."""
        m = features.shape[0]
        if m == 0 or next_ids.shape != (m,):
            raise ValueError(f"extend takes m >= 1 features (m, H) and m token ids (m,), got {tuple(features.shape)} and {tuple(next_ids.shape)}")
        if self.feature_dtype is None:
            self.feature_dtype = features.dtype
        head, dt = self.head, self.head.dtype
        x = head.inputs(features.to(self.device, dt), self.embed(next_ids.to(self.device)).to(dt))  # (m, H)
        normed = head.input_layernorm(x)
        positions = torch.arange(self._length, self._length + m, device=self.device)
        cos, sin = head.rotary(positions, dt)
        k, v = head.keys_values(normed, cos, sin)  # (kv, m, d)
        self._room(m)
        end = self._length + m
        self.k[:, self._length : end], self.v[:, self._length : end] = k, v
        self._length = end
        q = head.queries(normed[-1:], cos[-1:], sin[-1:])  # (heads, 1, d): only the last pair's output is needed
        attended = grouped_attention(q, self.k[:, :end], self.v[:, :end])
        return head.finish(x[-1:], attended)  # (1, H)

    def step(self, feature: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """One draft step: the head's own predicted feature (1, H) and the token drafted from it (1,) -> (1, H)."""
        return self.extend(feature, token)

    @torch.inference_mode()
    def logits(self, feature: torch.Tensor) -> torch.Tensor:
        """(1, H) -> (1, V) through the target's lm_head (restricted to the subset, if one was given),
        fed in the dtype of its float weight where it has one (a target kernel may compute its
        features in another dtype than the pair's lm_head: int8's in bf16), else the features' own."""
        return self.lm_head(feature.to(lm_head_dtype(self.lm_head, self.feature_dtype or feature.dtype)))


def lm_head_dtype(lm_head, fallback: torch.dtype) -> torch.dtype:
    """The dtype a dense lm_head (or a SubsetHead's dense inner layer) multiplies in; `fallback` for
    one that takes any (a w8a8 layer, a sliced subset)."""
    for module in (lm_head, getattr(lm_head, "inner", None)):
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.is_floating_point():
            return weight.dtype
    return fallback
