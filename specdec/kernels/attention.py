"""Every attention path a model runs, and the one switch that sets it: `set_attention`.

Qwen2.5 shares each key/value head among several query heads (grouped-query attention: 6 query
heads per key/value head in the 1.5B target, 7 in the 0.5B draft). None of the paths below copies
a key/value head once per query head (CUDA's in bf16 or fp16); transformers' `sdpa` does
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
- A batch-invariant model on a CPU that runs this project's kernel library, `row_attention`:
  `torch.ops.specdec.attention_rows` (csrc/attention_rows.cpp) computes each (batch, key/value
  head, query row) alone, over the keys that row may see, in key order, one fixed vector layout,
  so a row gets the same bits alone and in a check of K+1 (specdec/kernels/batch_invariant.py says
  which models are made so, and why torch's own attention is not). It runs 16 lanes a vector where
  the CPU has AVX-512 and 8 with AVX2, with the same bits; $SPECDEC_ATTENTION_PATH=avx2 forces the
  8-lane path (the tests compare the two).
- Anything else keeps transformers' `sdpa`.

`set_attention(model, invariant=...)` picks one of these for the device the model is on. It runs
where a model is made or moved, never on each run: when a pair is loaded (specdec/models/pair.py),
a draft variant or target kernel is assembled (specdec/kernels/variant_store.py), a model is made
batch-invariant (specdec/kernels/batch_invariant.py), and when start-up moves a pair built on the
CPU to CUDA (specdec/serving/startup.py `place`, every pair on ZeroGPU). The runners run what
they are given.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specdec.core.runners.lean_pass import CAUSAL
from specdec.kernels import w8a8_build

PACKED = "specdec_packed_sdpa"
GROUPED = "specdec_grouped_sdpa"
ROWS = "specdec_row_attention"
ROW_DTYPES = (torch.float32, torch.bfloat16)  # what row_attention's kernel computes; other dtypes go to packed_sdpa
PATH_ENV = "SPECDEC_ATTENTION_PATH"  # auto, avx2 or avx512: the instruction-set path of row_attention's kernel


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


def row_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                  dropout: float = 0.0, scaling: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """As packed_sdpa (same shapes in and out), each row alone in a fixed order of sums; what the
    kernel does not compute (another dtype, dropout, an additive mask) goes to packed_sdpa."""
    mask = attention_mask
    usable = query.dtype in ROW_DTYPES and key.dtype == value.dtype == query.dtype and dropout == 0.0
    if not usable or (mask is not None and (mask.dtype != torch.bool or mask.shape[-2] != query.shape[2])):
        return packed_sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    return torch.ops.specdec.attention_rows(query, key, value, mask, scale, rows_path()), None


def rows_path() -> int:
    """The path $SPECDEC_ATTENTION_PATH asks row_attention's kernel for (auto when unset); ValueError
    naming the variable when it names none of the kernel's (it has no AMX path)."""
    path = w8a8_build.path_from(PATH_ENV)
    if path == w8a8_build.PATHS["amx"]:
        raise ValueError(f"{PATH_ENV} must be auto, avx2 or avx512: the attention has no AMX path")
    return path


PATHS = {"cpu": (PACKED, packed_sdpa), "cuda": (GROUPED, grouped_sdpa)}
FUNCTIONS = {**dict(PATHS.values()), ROWS: row_attention}  # every path by the name transformers knows it by
for _function in FUNCTIONS.values():
    setattr(_function, CAUSAL, True)  # each draws a pass's causal pattern over a cache when given no mask: the eager runner's lean pass passes none


def attention_for(device_type: str) -> str:
    """The attention implementation models on this kind of device run (when not batch-invariant)."""
    return PATHS[device_type][0] if device_type in PATHS else "sdpa"


def device_type(model) -> str:
    """The kind of device the model runs on (its first weight's)."""
    return model.device.type


def rows_run_on(device) -> bool:
    """Whether `row_attention` runs here: a CPU that runs the kernel library (x86 with AVX2, a C++
    compiler: specdec/kernels/w8a8_build.py)."""
    return getattr(device, "type", str(device)) == "cpu" and w8a8_build.available(device)[0]


def set_attention(model, invariant: bool = False) -> str | None:
    """Set the model's attention for the device it is on now: `row_attention` where `invariant` and
    the rows run there (the kernel library built here if it is not yet), else the device's path.
    A no-op when the model already runs it, or when the module is no transformers model (the tests'
    bigram model) -> the implementation it now runs, or None."""
    if getattr(model, "config", None) is None or not hasattr(model, "set_attn_implementation"):
        return None
    kind = device_type(model)
    name = ROWS if invariant and rows_run_on(kind) else attention_for(kind)
    if model.config._attn_implementation != name:
        if name == ROWS:
            w8a8_build.load()  # the library that registers torch.ops.specdec.attention_rows
        register_paths()
        model.set_attn_implementation(name)
    return name


def register_paths() -> None:
    """Make every path known to transformers by name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    for name, function in FUNCTIONS.items():
        AttentionInterface.register(name, function)
        AttentionMaskInterface.register(name, sdpa_mask)  # the masks sdpa gets: bool, None where causal suffices
