"""One attention path per device, chosen from the device a model runs on when a runner takes it.

Qwen2.5 shares each key/value head among several query heads (grouped-query attention: 6 query
heads per key/value head in the 1.5B target, 7 in the 0.5B draft). Neither path below copies a
key/value head once per query head (CUDA's in bf16 or fp16); transformers' `sdpa` does
(`repeat_kv`) for every masked pass of more than one token: a check of the static and compiled
runners, over the whole cache.

- CPU, `packed_sdpa`: the query heads of each group stacked as rows of one query, (batch,
  kv_heads, group * q_len, dim) against (batch, kv_heads, kv_len, dim), with the mask repeated
  for the stacked rows (one row broadcasts as it is): the same sums over the same keys, one product per key/value head. torch
  2.13's CPU kernel is slow on transformers' `enable_gqa=True` in bf16: one query token over 200
  cached positions took 0.51 ms a layer, packed 0.06 ms (AVX-512 BF16 machine, one thread;
  docs/benchmarks.md, "W8A8").
- CUDA, `grouped_sdpa`: where no mask is given (a one-token eager pass, a prompt from position
  0), torch's `enable_gqa=True`, which the flash kernel reads in place (torch >= 2.5, bf16 or fp16;
  in fp32 torch's math kernel copies the heads); with a mask (every static and compiled pass, an
  eager check) the packed rows above: torch's masked kernels take no grouped heads, and a masked
  call with `enable_gqa` falls back to its math kernel, which repeats them (transformers' own
  `sdpa` avoids it for that reason). Each pass still attends over
  the whole cache (a captured graph has one shape; the valid length lives on the device).
  Not measured on a GPU yet (docs/deploy.md).
- Anything else keeps transformers' `sdpa`.

A model built on the CPU and then moved to CUDA (every pair on ZeroGPU, specdec/serving/startup.py)
still holds the CPU's choice until `use_device_attention` runs again: `runner_model` calls it for
every lender it makes, so the passes run the path of the device they run on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

PACKED = "specdec_packed_sdpa"
GROUPED = "specdec_grouped_sdpa"


def packed_sdpa(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                **kwargs) -> tuple[torch.Tensor, None]:
    """query (B, H, L, D), key and value (B, KV, C, D), attention_mask (B, 1, L, C) bool or None
    (then causal), kwargs as transformers passes them (dropout, scaling: None for 1 / sqrt(D), ...)
    -> ((B, L, H, D), None), as transformers' attention functions return."""
    b, h, length, d = query.shape
    kv, c = key.shape[1], key.shape[2]
    group = h // kv
    q = query.reshape(b, kv, group * length, d)  # row r * L + i: query head (g * group + r), position i
    mask = attention_mask
    if mask is None and length > 1:  # causal, the last query position seeing every key
        mask = torch.ones(length, c, dtype=torch.bool, device=query.device).tril(c - length)[None, None]
    if mask is not None and mask.shape[-2] == length > 1 and group > 1:  # one row broadcasts over the stacked heads as it is
        mask = mask.repeat(1, 1, group, 1)  # (B, 1, group * L, C): the same rows for every stacked head
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=kwargs.get("dropout", 0.0),
                                         scale=kwargs.get("scaling"))
    return out.reshape(b, h, length, d).transpose(1, 2).contiguous(), None


def grouped_sdpa(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                 **kwargs) -> tuple[torch.Tensor, None]:
    """As packed_sdpa (same shapes in and out), but a pass without a mask whose causal pattern
    torch can draw itself (one token, or as many tokens as keys) goes to torch with grouped heads."""
    length, c = query.shape[2], key.shape[2]
    if attention_mask is not None or length not in (1, c):
        return packed_sdpa(module, query, key, value, attention_mask, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, dropout_p=kwargs.get("dropout", 0.0), scale=kwargs.get("scaling"),
                                         is_causal=length > 1, enable_gqa=True)  # (B, H, L, D)
    return out.transpose(1, 2).contiguous(), None


PATHS = {"cpu": (PACKED, packed_sdpa), "cuda": (GROUPED, grouped_sdpa)}


def attention_for(device_type: str) -> str:
    """The attention implementation models on this kind of device run."""
    return PATHS[device_type][0] if device_type in PATHS else "sdpa"


def device_type(model) -> str:
    """The kind of device the model runs on (its first weight's)."""
    return model.device.type


KEPT = "_specdec_kept_attention"  # (device type, implementation): an attention chosen for the model on that device


def keep_attention(model) -> None:
    """Keep the attention the model runs now while it stays on this device: a kernel layer chose it
    (the batch-invariant rows of specdec/kernels/batch_invariant.py), and a runner must not reset it."""
    setattr(model, KEPT, (device_type(model), model.config._attn_implementation))


def use_device_attention(model) -> str | None:
    """Set the model's attention to its device's path, or to the one kept for it on this device (a
    no-op when it already runs it, or when the module is no transformers model) -> the
    implementation it now runs, or None."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        return None
    kept_on, kept = getattr(model, KEPT, (None, None))
    name = kept if kept_on == device_type(model) else attention_for(device_type(model))
    if config._attn_implementation != name:
        register_paths()
        model.set_attn_implementation(name)
    return name


def register_paths() -> None:
    """Make every device's path known to transformers by name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    for name, function in PATHS.values():
        AttentionInterface.register(name, function)
        AttentionMaskInterface.register(name, sdpa_mask)  # the masks sdpa gets (None where causal suffices)
