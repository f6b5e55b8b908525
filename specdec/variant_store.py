"""The stored form of a model variant, and its disk cache.

A variant is stored as a layout (which modules are replaced, and by what: a quantized linear
layer, a quantized embedding, a truncated head) and one flat dict of tensors. `assemble` builds a
model from that without allocating the original weights, whether the tensors were just computed
or read back from `<model folder>.<variant>/`. Written into a `.partial` folder and renamed when
complete, like specdec/bundle.py, so an interrupted write never looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from .quant import QuantEmbedding, QuantLinear, QuantWeight, quantize

FORMAT = 1  # layout of a cached variant folder; bump it to have old caches rebuilt
MARKER = "complete.json"


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


def quantized_state(model: nn.Module, recipe, ids: torch.Tensor | None) -> tuple[dict, dict]:
    """Quantize every linear layer, the head and the embedding table as `recipe` (variants.Recipe)
    says; ids: the rows a truncated head keeps (None: all)."""
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


def _source_mark(draft_dir: Path, recipe) -> dict:
    """What the variant was built from: the converted model's own marker, the recipe, this code's format."""
    try:
        source = json.loads((Path(draft_dir) / "complete.json").read_text()).get("sha256")
    except (OSError, ValueError):
        source = None
    mark = {"format": FORMAT, "source": source, "recipe": asdict(recipe)}
    return json.loads(json.dumps(mark))  # as read back from the marker (tuples become lists)


def is_complete(folder: Path, draft_dir: Path, recipe) -> bool:
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("built_from") == _source_mark(draft_dir, recipe)


def save_folder(folder: Path, draft_dir: Path, name: str, recipe, layout: dict, tensors: dict) -> None:
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
        (partial / "layout.json").write_text(json.dumps({"variant": name, "layout": layout}, indent=1))
        (partial / MARKER).write_text(json.dumps({"built_from": _source_mark(draft_dir, recipe)}, indent=1))
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
