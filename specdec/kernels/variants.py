"""Draft variants: the draft made cheaper for its target, never changing the output.

The target checks every draft token, so the draft may be as approximate as we like: a cheaper
draft changes only how many tokens are accepted. A variant is named `<weights>[-v16k|-v32k]`
(the names and their parsing: specdec/core/variant_names.py):

- weights `dense` (called `bf16` before): the draft's own weights (in the pair's dtype); `int8` / `int4`: weight-only
  quantized by specdec/kernels/quant.py (see RECIPES for which layer gets what); `w8a8`: the int8
  weights of `int8`, every linear layer and the head run with int8 activations quantized per row
  (specdec/kernels/w8a8.py; offered only where that kernel runs: specdec/kernels/device_offer.py);
  `w4a8`: the decoder layers in Q4_K bytes (specdec/kernels/q4k.py `quantize`) run with int8 activations
  by specdec/kernels/w4a8.py, the head W8A8 and the embedding int8 (offered where w8a8 is);
- `-v16k` / `-v32k`: a truncated vocabulary head that scores only the 16384 / 32768 most frequent
  tokens (specdec/models/vocab_subset.py) and fills every other logit with -inf, so argmax, softmax and
  rejection sampling downstream see an ordinary full-width row: q is a distribution over the
  subset by construction.

Quantized variants are built once from the draft and cached on disk beside its converted copy
(`<draft folder>.<variant>/`, written to a `.partial` folder and renamed when complete, like
specdec/models/bundle.py), so a restart loads them in about a second without building anything, and
without touching the dense weights. A pair keeps every variant it has built (`pair.built.drafts`), so
switching between runs costs nothing after the first use. Pairs without a converted folder
(tiny-random, Hub models) build variants in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from specdec.core.variant_names import canonical, native_kernel, variant_parts
from specdec.kernels import w8a8_build
from specdec.kernels.head_offer import head_ids
from specdec.kernels.quant import INT4_GROUP, module_bytes
from specdec.kernels.variant_store import (assemble, is_complete, load_folder, quantized_state, save_variant, stock_state, variant_folder,
                            variant_mark)



@dataclass(frozen=True)
class Recipe:
    """Bits per part of the draft (a part kept in float has None)."""

    layers: int  # every linear layer of the decoder blocks
    head: int  # the output projection (kept wider than the layers: it decides the proposal)
    embedding: int  # the input embedding table (one row read per token, but resident in memory)
    group: int = INT4_GROUP  # input columns per int4 scale
    wider: tuple[str, ...] = ()  # layer names (suffixes) kept at int8 in an int4 recipe: the most sensitive ones
    activations: int | None = None  # 8: linear layers and head quantize their input rows to int8 (W8A8); None: weight-only

    def layer_bits(self, name: str) -> int:
        return 8 if any(name.endswith(w) for w in self.wider) else self.layers


# Chosen by measurement (docs/benchmarks.md, "Draft variants"): per-token agreement with the
# target's own output, pass time and resident memory.
# The embedding of `w8a8` stays weight-only int8: a lookup reads one row, there is no product to run.
# `w4a8`: 4-bit layers with int8 activations are Q4_K bytes on the W4A8 kernel (variant_store), the head
# W8A8 (kept wider, as llama.cpp's Q4_K_M keeps its head in 6 bits).
RECIPES = {"int8": Recipe(layers=8, head=8, embedding=8), "int4": Recipe(layers=4, head=8, embedding=4),
           "w8a8": Recipe(layers=8, head=8, embedding=8, activations=8),
           "w4a8": Recipe(layers=4, head=8, embedding=8, activations=8)}


@dataclass(frozen=True)
class VariantSpec:
    name: str
    bits: int | None  # decoder-layer bits; None: the draft's own weights
    vocab: int | None  # tokens the head scores; None: the whole vocabulary

    @property
    def is_stock(self) -> bool:
        return self.bits is None and self.vocab is None

    @property
    def weights(self) -> str:
        """The weights part of the name: `int4-v32k` -> `int4`."""
        return self.name.partition("-")[0]

    @property
    def recipe(self) -> Recipe | None:
        return RECIPES[self.weights] if self.bits else None


def parse_variant(name) -> VariantSpec:
    """`int4-v32k` -> VariantSpec(bits=4, vocab=32768), an old name as today's (`bf16-v32k` ->
    `dense-v32k`); ValueError naming the field otherwise."""
    return VariantSpec(canonical(name), *variant_parts(name))


# --- getting a variant ----------------------------------------------------------------------------


def draft_model(pair, name: str) -> nn.Module:
    """The draft of `pair` as variant `name`: built, loaded from the disk cache, or kept from before."""
    spec = parse_variant(name)
    name = spec.name
    if spec.is_stock:
        return pair.draft
    if native_kernel(name):
        w8a8_build.require_for(native_kernel(name), pair.device)
    drafts = pair.built.drafts
    if pair.draft is None and name not in drafts:
        raise ValueError(f"draft_variant {name!r} needs a draft model, and pair {pair.name!r} has none")
    if name not in drafts:
        drafts[name] = load_or_build(pair, spec)
    return drafts[name]


def target_model(pair, name: str = "int4") -> nn.Module:
    """The target quantized with the same code and recipe (`int4` or `int8`): the lossy lane,
    plain decoding that is faster than the exact target and emits different text. Cached on disk
    beside the target's converted copy when there is one, like the draft variants."""
    spec = parse_variant(name)
    if spec.weights not in ("int8", "int4") or spec.vocab is not None:
        raise ValueError(f"a quantized target is int8 or int4, got {name!r}")
    lossy = pair.built.lossy
    if name not in lossy:
        lossy[name] = quantized_model(pair.target, pair.target_dir, spec, None, compute_dtype(pair, spec), pair.device)
    return lossy[name]


def compute_dtype(pair, spec: VariantSpec) -> torch.dtype:
    """Quantized variants compute in bf16 on a CPU whatever the pair's dtype: torch's weight-only
    kernels have their fast path there (one row through a 4864 x 896 int4 layer: 0.14 ms with
    bf16 activations, 4.0 ms with fp32, AVX-512 BF16 machine)."""
    if spec.bits and pair.device.type == "cpu":
        return torch.bfloat16
    return pair.dtype


def load_or_build(pair, spec: VariantSpec) -> nn.Module:
    ids = head_ids(pair, spec.vocab, rows=pair.draft.get_output_embeddings().weight.shape[0]) if spec.vocab else None
    if spec.bits is None:  # a truncated head on the draft's own weights: instant, nothing to cache
        return assemble(pair.draft.config, *stock_state(pair.draft, ids), pair.dtype, pair.device)
    return quantized_model(pair.draft, pair.draft_dir, spec, ids, compute_dtype(pair, spec), pair.device)


def quantized_model(base: nn.Module, base_dir: Path | None, spec: VariantSpec, ids, dtype, device) -> nn.Module:
    """From the disk cache beside `base_dir` when it was built from the same inputs and its files are
    whole (specdec.kernels.variant_store); else quantize `base` and cache it."""
    from safetensors import SafetensorError

    folder = variant_folder(base_dir, spec.name) if base_dir else None
    mark = variant_mark(base_dir, spec.recipe, ids) if folder is not None else None
    if folder is not None and is_complete(folder, mark):
        try:
            return load_folder(folder, base_dir, dtype, device)
        except (OSError, ValueError, KeyError, SafetensorError):  # checked whole, yet unreadable: build it again
            pass
    layout, tensors = quantized_state(base, spec.recipe, ids)
    if folder is not None:
        save_variant(folder, mark, spec.name, layout, tensors)
    return assemble(base.config, layout, tensors, dtype, device)


def resident_gb(model: nn.Module | None) -> float | None:
    return None if model is None else module_bytes(model) / 1e9
