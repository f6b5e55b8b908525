"""Draft variants: the draft made cheaper for its target, never changing the output.

The target checks every draft token, so the draft may be as approximate as we like: a cheaper
draft changes only how many tokens are accepted. A variant is named `<weights>[-v16k|-v32k]`:

- weights `bf16`: the draft's own weights (in the pair's dtype); `int8` / `int4`: weight-only
  quantized by specdec/quant.py (see RECIPES for which layer gets what);
- `-v16k` / `-v32k`: a truncated vocabulary head that scores only the 16384 / 32768 most frequent
  tokens (specdec/vocab_subset.py) and fills every other logit with -inf, so argmax, softmax and
  rejection sampling downstream see an ordinary full-width row: q is a distribution over the
  subset by construction.

Quantized variants are built once from the draft and cached on disk beside its converted copy
(`<draft folder>.<variant>/`, written to a `.partial` folder and renamed when complete, like
specdec/bundle.py), so a restart loads them in about a second without building anything, and
without touching the bf16 weights. A pair keeps every variant it has built (`pair.variants`), so
switching between runs costs nothing after the first use. Pairs without a converted folder
(tiny-random, Hub models) build variants in memory.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from .quant import INT4_GROUP, QuantEmbedding, QuantLinear, QuantWeight, module_bytes, quantize
from .vocab_subset import frequency_order, subset_ids

WEIGHTS = {"bf16": None, "int8": 8, "int4": 4}  # name -> bits of the decoder layers (None: as loaded)
HEADS = {"": None, "-v16k": 16384, "-v32k": 32768}  # suffix -> tokens the draft head scores (None: all)
VARIANTS = tuple(w + h for w in WEIGHTS for h in HEADS)
FORMAT = 1  # layout of a cached variant folder; bump it to have old caches rebuilt
MARKER = "complete.json"


@dataclass(frozen=True)
class Recipe:
    """Bits per part of the draft (a part kept in float has None)."""

    layers: int  # every linear layer of the decoder blocks
    head: int  # the output projection (kept wider than the layers: it decides the proposal)
    embedding: int  # the input embedding table (one row read per token, but resident in memory)
    group: int = INT4_GROUP  # input columns per int4 scale
    wider: tuple[str, ...] = ()  # layer names (suffixes) kept at int8 in an int4 recipe: the most sensitive ones

    def layer_bits(self, name: str) -> int:
        return 8 if any(name.endswith(w) for w in self.wider) else self.layers


# Chosen by measurement (docs/benchmarks.md, "Draft variants"): per-token agreement with the
# target's own output, pass time and resident memory.
RECIPES = {8: Recipe(layers=8, head=8, embedding=8), 4: Recipe(layers=4, head=8, embedding=4)}


@dataclass(frozen=True)
class VariantSpec:
    name: str
    bits: int | None  # decoder-layer bits; None: the draft's own weights
    vocab: int | None  # tokens the head scores; None: the whole vocabulary

    @property
    def is_stock(self) -> bool:
        return self.bits is None and self.vocab is None

    @property
    def recipe(self) -> Recipe | None:
        return RECIPES[self.bits] if self.bits else None


def parse_variant(name) -> VariantSpec:
    """`int4-v32k` -> VariantSpec(bits=4, vocab=32768); ValueError naming the field otherwise."""
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(f"draft_variant must be one of {', '.join(VARIANTS)}, got {name!r}")
    weights, _, head = name.partition("-")
    return VariantSpec(name, WEIGHTS[weights], HEADS["-" + head if head else ""])


class SubsetHead(nn.Module):
    """Scores only `ids`, scattered into a full-width row of -inf: (..., d) -> (..., vocab)."""

    def __init__(self, inner: nn.Module, ids: torch.Tensor, vocab: int):
        super().__init__()
        self.inner = inner  # (..., d) -> (..., N): a linear layer over the subset's rows
        self.register_buffer("ids", ids)  # (N,) sorted token ids
        self.vocab = vocab

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        sub = self.inner(hidden)  # (..., N)
        full = sub.new_full((*sub.shape[:-1], self.vocab), float("-inf"))  # (..., V)
        return full.index_copy_(-1, self.ids, sub)


# --- getting a variant ----------------------------------------------------------------------------


def draft_model(pair, name: str) -> nn.Module:
    """The draft of `pair` as variant `name`: built, loaded from the disk cache, or kept from before."""
    spec = parse_variant(name)
    if spec.is_stock:
        return pair.draft
    if pair.draft is None and name not in pair.variants:
        raise ValueError(f"draft_variant {name!r} needs a draft model, and pair {pair.name!r} has none")
    if name not in pair.variants:
        pair.variants[name] = load_or_build(pair, spec)
    return pair.variants[name]


def target_model(pair, name: str = "int4") -> nn.Module:
    """The target quantized with the same code and recipe (`int4` or `int8`): the lossy lane,
    plain decoding that is faster than the exact target and emits different text. Cached on disk
    beside the target's converted copy when there is one, like the draft variants."""
    spec = parse_variant(name)
    if spec.bits is None or spec.vocab is not None:
        raise ValueError(f"a quantized target is int8 or int4, got {name!r}")
    key = f"target:{name}"
    if key not in pair.variants:
        pair.variants[key] = _quantized(pair.target, pair.target_dir, spec, None, compute_dtype(pair, spec), pair.device)
    return pair.variants[key]


def compute_dtype(pair, spec: VariantSpec) -> torch.dtype:
    """Quantized variants compute in bf16 on a CPU whatever the pair's dtype: torch's weight-only
    kernels have their fast path there (one row through a 4864 x 896 int4 layer: 0.14 ms with
    bf16 activations, 4.0 ms with fp32, AVX-512 BF16 machine)."""
    if spec.bits and pair.device.type == "cpu":
        return torch.bfloat16
    return pair.dtype


def load_or_build(pair, spec: VariantSpec) -> nn.Module:
    ids = head_ids(pair, spec) if spec.vocab else None
    if spec.bits is None:  # a truncated head on the draft's own weights: instant, nothing to cache
        return assemble(pair.draft.config, *stock_state(pair.draft, ids), pair.dtype, pair.device)
    return _quantized(pair.draft, pair.draft_dir, spec, ids, compute_dtype(pair, spec), pair.device)


def _quantized(base: nn.Module, base_dir: Path | None, spec: VariantSpec, ids, dtype, device) -> nn.Module:
    """From the disk cache beside `base_dir` when complete; else quantize `base` (and cache it)."""
    folder = variant_folder(base_dir, spec.name) if base_dir else None
    if folder is not None and is_complete(folder, base_dir):
        return load_folder(folder, base_dir, dtype, device)
    layout, tensors = quantized_state(base, spec, ids)
    if folder is not None:
        save_folder(folder, base_dir, spec, layout, tensors)
    return assemble(base.config, layout, tensors, dtype, device)


def head_ids(pair, spec: VariantSpec) -> torch.Tensor:
    """(N,) the tokens the head keeps: end-of-sequence and special tokens, then the most frequent."""
    order = pair.token_order if pair.token_order is not None else frequency_order(pair.tokenizer)
    always = [*sorted(pair.eos_ids), *getattr(pair.tokenizer, "all_special_ids", [])]
    return subset_ids(order, spec.vocab, always, pair.draft.get_output_embeddings().weight.shape[0])


# --- the stored form: a layout (what each replaced module is) and a flat dict of tensors ----------


def stock_state(model: nn.Module, ids: torch.Tensor) -> tuple[dict, dict]:
    """The draft's own tensors (shared, not copied) with the head cut to `ids`."""
    head_name = _name_of(model, model.get_output_embeddings())
    tensors = {k: v for k, v in model.state_dict().items() if not k.startswith(head_name + ".")}
    head = model.get_output_embeddings()
    tensors[f"{head_name}.weight"] = head.weight[ids]
    if head.bias is not None:
        tensors[f"{head_name}.bias"] = head.bias[ids]
    tensors[f"{head_name}.ids"] = ids
    return {head_name: {"kind": "head", "bits": None}}, tensors


def quantized_state(model: nn.Module, spec: VariantSpec, ids: torch.Tensor | None, recipe: Recipe | None = None) -> tuple[dict, dict]:
    """Quantize every linear layer, the head and the embedding table as the recipe says."""
    recipe = recipe or spec.recipe
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    layout, tensors, done = {}, {}, set()
    for name, module in model.named_modules():
        if module is head:
            weight = head.weight if ids is None else head.weight[ids]
            tensors.update(quantize(weight, recipe.head, recipe.group).tensors(name))
            if ids is not None:
                tensors[f"{name}.ids"] = ids
            layout[name] = {"kind": "head" if ids is not None else "linear", "bits": recipe.head, "group": recipe.group}
        elif module is embedding:
            tensors.update(quantize(module.weight, recipe.embedding, recipe.group).tensors(name))
            layout[name] = {"kind": "embedding", "bits": recipe.embedding, "group": recipe.group}
        elif isinstance(module, nn.Linear):
            bits = recipe.layer_bits(name)
            tensors.update(quantize(module.weight, bits, recipe.group).tensors(name))
            layout[name] = {"kind": "linear", "bits": bits, "group": recipe.group}
        else:
            continue
        done.add(name)
        bias = getattr(module, "bias", None)
        if isinstance(bias, torch.Tensor):
            tensors[f"{name}.bias"] = bias[ids] if module is head and ids is not None else bias
    for key, value in model.state_dict().items():  # norms and anything else: kept as they are
        owner = key.rsplit(".", 1)[0]
        if owner not in done and key not in tensors:
            tensors[key] = value
    return layout, tensors


def assemble(config, layout: dict, tensors: dict, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """Build the model from its stored form without allocating the original weights: a skeleton on
    the meta device, the replaced modules built from their tensors, everything else assigned."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    vocab = config.vocab_size
    for name, entry in layout.items():
        bits, group = entry.get("bits"), entry.get("group", 0)
        bias = tensors.get(f"{name}.bias")
        if entry["kind"] == "embedding":
            module = QuantEmbedding(QuantWeight.from_tensors(tensors, name, bits, group), dtype, device)
        else:
            if bits:
                inner = QuantLinear(QuantWeight.from_tensors(tensors, name, bits, group), bias, dtype, device)
            else:
                weight = tensors[f"{name}.weight"]
                inner = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
                inner.weight = nn.Parameter(weight.to(device=device, dtype=dtype), requires_grad=False)
                if bias is not None:
                    inner.bias = nn.Parameter(bias.to(device=device, dtype=dtype), requires_grad=False)
            module = SubsetHead(inner, tensors[f"{name}.ids"].to(device), vocab) if entry["kind"] == "head" else inner
        model.set_submodule(name, module)
    rest = {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in tensors.items()
            if k.rsplit(".", 1)[0] not in layout}
    model.load_state_dict(rest, strict=False, assign=True)
    for name, module in list(model.named_modules()):  # rotary tables are computed, not stored
        if type(module).__name__.endswith("RotaryEmbedding"):
            model.set_submodule(name, type(module)(model.config).to(device))
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"draft variant is missing tensors for {', '.join(left[:3])}")
    return model.eval()


def _name_of(model: nn.Module, target: nn.Module) -> str:
    return next(n for n, m in model.named_modules(remove_duplicate=False) if m is target)


# --- the disk cache -------------------------------------------------------------------------------


def variant_folder(draft_dir: Path, name: str) -> Path:
    return Path(draft_dir).with_name(f"{Path(draft_dir).name}.{name}")


def _source_mark(draft_dir: Path) -> dict:
    """What the variant was built from: the converted draft's own marker, and this code's format."""
    try:
        source = json.loads((Path(draft_dir) / "complete.json").read_text()).get("sha256")
    except (OSError, ValueError):
        source = None
    mark = {"format": FORMAT, "source": source, "recipes": {str(b): asdict(r) for b, r in RECIPES.items()}}
    return json.loads(json.dumps(mark))  # as read back from the marker (tuples become lists)


def is_complete(folder: Path, draft_dir: Path) -> bool:
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("built_from") == _source_mark(draft_dir)


def save_folder(folder: Path, draft_dir: Path, spec: VariantSpec, layout: dict, tensors: dict) -> None:
    """Write into `.<name>.partial`, then rename: an interrupted write never looks complete.
    A cache that cannot be written is not an error: the variant is simply rebuilt next time."""
    from safetensors.torch import save_file

    partial = folder.with_name(f".{folder.name}.partial")
    try:
        for stale in (partial, folder):
            if stale.exists():
                shutil.rmtree(stale)
        partial.mkdir(parents=True)
        save_file({k: v.contiguous() for k, v in tensors.items()}, partial / "variant.safetensors")
        (partial / "layout.json").write_text(json.dumps({"variant": spec.name, "layout": layout}, indent=1))
        (partial / MARKER).write_text(json.dumps({"built_from": _source_mark(draft_dir)}, indent=1))
        os.replace(partial, folder)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)


def load_folder(folder: Path, base_dir: Path, dtype: torch.dtype, device: torch.device) -> nn.Module:
    from safetensors.torch import load_file
    from transformers import AutoConfig

    layout = json.loads((folder / "layout.json").read_text())["layout"]
    tensors = load_file(folder / "variant.safetensors")
    config = AutoConfig.from_pretrained(base_dir)  # the variant needs the model's shape, not its weights
    return assemble(config, layout, tensors, dtype, device)


def resident_gb(model: nn.Module | None) -> float | None:
    return None if model is None else module_bytes(model) / 1e9


# --- the measured default -------------------------------------------------------------------------

# The recorded decision (docs/benchmarks.md, "The default draft variant"): the variant that won the
# bench prompt set, per pair and kind of machine it was measured on. Anything not measured keeps
# the stock draft (a variant that helps one pair may hurt another: tiny-random's random weights
# lose most of their agreement in int4).
MEASURED_DEFAULTS = {("qwen2.5-coder-1.5b/0.5b", "cpu-avx512_bf16"): "int4-v32k"}


def machine_kind(device: torch.device) -> str:
    """cuda | cpu-avx512_bf16 (native bf16: AVX-512 BF16 or AMX) | cpu."""
    from .cached_model import NATIVE_BF16

    if device.type != "cpu":
        return device.type
    return "cpu-avx512_bf16" if NATIVE_BF16 else "cpu"


def default_variant(pair_name: str, device: torch.device) -> str:
    return MEASURED_DEFAULTS.get((pair_name, machine_kind(device)), "bf16")
