"""The head run over whole sequences at once, drafting `depth` tokens from every position (training-time test).

Step 1 is the head as it runs on real pairs: position t holds (f_t, token t+1), attends to positions
0..t, and predicts f_{t+1}. Step s > 1 is what drafting token s from position t looks like at run
time (specdec/core/head.py, HeadRun.step): the pair (the head's own prediction from step s-1,
token t+s) sits at position t+s-1 and attends to the real positions 0..t and to the draft pairs
of steps 2..s-1 at t+1..t+s-2, i.e. to the same t in every earlier step (EAGLE-3's training-time
test). So every position of a sequence trains every draft position in one pass, and the masks are
exactly what drafting sees: tests/test_head.py checks step s against HeadRun's extend and steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specdec.core.head import HeadWeights


def real_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention over the real pairs: q (B, heads, T, d), k and v (B, kv, T, d) -> (B, heads, T, d)."""
    b, heads, t, d = q.shape
    kv = k.shape[1]
    group = heads // kv
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # query head h reads key head h // group
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def draft_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, own_k: list, own_v: list) -> torch.Tensor:
    """A draft step's attention: each query t over the real keys 0..t and over the draft keys of the
    same t from every earlier draft step and this one. q (B, heads, T, d); k, v (B, kv, T, d);
    own_k, own_v: lists of (B, kv, T, d) -> (B, heads, T, d)."""
    b, heads, t, d = q.shape
    kv = k.shape[1]
    grouped = q.reshape(b, kv, heads // kv, t, d) * d**-0.5  # (B, kv, group, T, d)
    real = grouped @ k[:, :, None].transpose(-1, -2)  # (B, kv, group, T, T)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    real = real.masked_fill(~causal, float("-inf"))
    own = torch.stack([(grouped * ok[:, :, None]).sum(-1) for ok in own_k], dim=-1)  # (B, kv, group, T, S)
    scores = torch.cat([real, own], dim=-1)
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(q.dtype)
    out = weights[..., :t] @ v[:, :, None]  # (B, kv, group, T, d)
    for j, ov in enumerate(own_v):
        out = out + weights[..., t + j, None] * ov[:, :, None]
    return out.reshape(b, heads, t, d)


def unroll(head: HeadWeights, features: torch.Tensor, embeds: torch.Tensor, depth: int,
           read: torch.Tensor | None = None) -> list[torch.Tensor]:
    """features (B, T, H): f_0..f_{T-1}; embeds (B, T, H): the embeddings of tokens 0..T-1.
    -> `depth` tensors (B, T-1, H): step s's prediction from position t, which stands for
    f_{t+s}. Positions with t + s > T - 1 have no real token to read; they are computed on
    padding, touch no other position, and the loss masks them. read (B, T, H): what the head reads
    of the real pairs in place of the features (EAGLE-3's fused rows: specdec/train/fusion.py)."""
    length = features.shape[1] - 1
    dt = features.dtype
    cos, sin = head.rotary(torch.arange(length + depth, device=features.device), dt)
    pad = embeds[:, -1:].expand(-1, depth, -1)
    tokens = torch.cat([embeds, pad], dim=1)  # (B, T + depth, H): token t+s for every t < T-1
    x = head.inputs((features if read is None else read)[:, :-1], tokens[:, 1 : 1 + length])
    normed = head.input_layernorm(x)
    k, v = head.keys_values(normed, cos[:length], sin[:length])
    out = head.finish(x, real_attention(head.queries(normed, cos[:length], sin[:length]), k, v))
    steps, own_k, own_v = [out], [], []
    for s in range(2, depth + 1):
        x = head.inputs(out, tokens[:, s : s + length])
        normed = head.input_layernorm(x)
        where = slice(s - 1, s - 1 + length)  # step s's pair from t sits at position t + s - 1
        ks, vs = head.keys_values(normed, cos[where], sin[where])
        own_k.append(ks)
        own_v.append(vs)
        out = head.finish(x, draft_attention(head.queries(normed, cos[where], sin[where]), k, v, own_k, own_v))
        steps.append(out)
    return steps
