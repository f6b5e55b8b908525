"""The stored form of a model variant, and its disk cache.

A variant is stored as a layout (which modules are replaced, and by what: a quantized linear
layer, a quantized embedding, a truncated head) and one flat dict of tensors. `assemble` builds a
model from that without allocating the original weights, whether the tensors were just computed
or read back from `<model folder>.<variant>/`. Written into a `.partial` folder and renamed when
complete, like specdec/models/bundle.py, so an interrupted write never looks complete; read back only
when it was built from the same inputs and its files are whole (the disk cache, below).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from specdec.kernels.attention import set_attention
from specdec.kernels.quant import QuantEmbedding, QuantLinear, QuantWeight, quantize, quantizer_parameters


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
    modules = list(model.named_modules())
    # The bar shows on a terminal only (a first start, or a rebuild after an input changed).
    for name, module in tqdm(modules, desc=f"Building a {recipe.layers}-bit variant (once)", unit="module", disable=None):
        if module is head:
            weight = head.weight if ids is None else head.weight[ids]
            tensors.update(quantize(weight, recipe.head, recipe.group).tensors(name))
            if ids is not None:
                tensors[f"{name}.ids"] = ids
            layout[name] = {"kind": "head" if ids is not None else "linear", "bits": recipe.head, "group": recipe.group, **_w8a8(recipe)}
        elif module is embedding:
            tensors.update(quantize(module.weight, recipe.embedding, recipe.group).tensors(name))
            layout[name] = {"kind": "embedding", "bits": recipe.embedding, "group": recipe.group}
        elif isinstance(module, nn.Linear):
            bits = recipe.layer_bits(name)
            layout[name] = {"kind": "linear", "bits": bits, "group": recipe.group, **_w8a8(recipe)}
            if _is_w4a8(layout[name]):  # Q4_K bytes, which the W4A8 kernel runs on their own grid
                from specdec.kernels import q4k

                tensors[f"{name}.blocks"] = q4k.quantize(module.weight)
                layout[name]["cols"] = module.weight.shape[1]
            else:
                tensors.update(quantize(module.weight, bits, recipe.group).tensors(name))
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


def _w8a8(recipe) -> dict:
    """The layout entry's mark of a layer run with int8 activations (absent for weight-only ones)."""
    return {"activations": 8} if getattr(recipe, "activations", None) == 8 else {}


def _is_w4a8(entry: dict) -> bool:
    """A layout entry of a 4-bit layer with int8 activations: stored as Q4_K bytes (`<name>.blocks`)."""
    return entry.get("bits") == 4 and entry.get("activations") == 8


def _linear(entry: dict, tensors: dict, name: str, bias, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """A stored quantized linear layer: W8A8 or W4A8 (int8 activations per row) or weight-only."""
    if _is_w4a8(entry):
        from specdec.kernels.w4a8 import W4A8Linear

        return W4A8Linear(tensors[f"{name}.blocks"], entry["cols"], bias, device)
    weight = QuantWeight.from_tensors(tensors, name, entry["bits"], entry.get("group", 0))
    if entry.get("activations") == 8:
        from specdec.kernels.w8a8 import W8A8Linear

        return W8A8Linear(weight, bias, device)
    return QuantLinear(weight, bias, dtype, device)


def assemble(config, layout: dict, tensors: dict, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """Build the model from its stored form without allocating the original weights: a skeleton on
    the meta device, the replaced modules built from their tensors, everything else assigned."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        # A config of its own: transformers keeps the object it is given, and a model's attention is
        # chosen on its config (specdec/kernels/attention.py switches one model, not its base).
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)
    vocab = config.vocab_size
    for name, entry in layout.items():
        bits, group = entry.get("bits"), entry.get("group", 0)
        bias = tensors.get(f"{name}.bias")
        if entry["kind"] == "embedding":
            module = QuantEmbedding(QuantWeight.from_tensors(tensors, name, bits, group), dtype, device)
        else:
            if bits:
                inner = _linear(entry, tensors, name, bias, dtype, device)
            else:
                weight = tensors[f"{name}.weight"]
                inner = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
                inner.weight = nn.Parameter(weight.to(device=device, dtype=dtype), requires_grad=False)
                if bias is not None:
                    inner.bias = nn.Parameter(bias.to(device=device, dtype=dtype), requires_grad=False)
            module = SubsetHead(inner, tensors[f"{name}.ids"].to(device), vocab) if entry["kind"] == "head" else inner
        model.set_submodule(name, module)
    return fill_the_rest(model, layout, tensors, dtype, device, "draft variant")


def fill_the_rest(model: nn.Module, layout: dict, tensors: dict, dtype: torch.dtype, device: torch.device, what: str) -> nn.Module:
    """After the modules in `layout` are built: assign every other stored tensor, recompute the
    rotary tables, and refuse a model left with tensors on the meta device (naming `what` it is)."""
    rest = {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in tensors.items()
            if k.rsplit(".", 1)[0] not in layout}
    model.load_state_dict(rest, strict=False, assign=True)
    for name, module in list(model.named_modules()):  # rotary tables are computed, not stored
        if type(module).__name__.endswith("RotaryEmbedding"):
            model.set_submodule(name, type(module)(model.config).to(device))
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"{what} is missing tensors for {', '.join(left[:3])}")
    set_attention(model)  # its device's, as the pair's own models (specdec/models/pair.py)
    return model.eval()


def _name_of(model: nn.Module, target: nn.Module) -> str:
    return next(n for n, m in model.named_modules(remove_duplicate=False) if m is target)


# --- the disk cache -------------------------------------------------------------------------------
#
# A stored model is keyed on everything it was built from (`built_from`): the converted copy's own
# marker (its GGUF's hash, its format and the library versions that converted it), whatever the
# caller adds (here the recipe, the quantizer's parameters and the truncated head's token ids), the
# library versions that shape the tensors now, and this code's FORMAT. Its marker records that key
# and the size and SHA-256 of every file, so a changed input, a truncated or damaged file, or an
# unreadable marker means "build it again", never a crash. `built_from`, `is_complete` and
# `save_folder` know nothing of variants: any model stored beside its converted copy can use them.

FORMAT = 2  # layout of a stored folder and its marker; bump it to have old caches rebuilt
MARKER = "complete.json"
VERSIONED = ("torch", "transformers", "safetensors")  # libraries whose versions shape the stored tensors
BLOCK = 1 << 22  # bytes read at a time while hashing


def library_versions() -> dict[str, str | None]:
    import importlib.metadata

    def version(package: str) -> str | None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {p: version(p) for p in VERSIONED}


def built_from(source_dir: Path, **inputs) -> dict:
    """The key of a model stored beside the converted copy in `source_dir`: that copy's own marker
    (None when unreadable: then nothing matches), the caller's `inputs` (JSON-able), the library
    versions and FORMAT; in the form it has when read back from a marker (tuples become lists)."""
    try:
        source = json.loads((Path(source_dir) / MARKER).read_text())
    except (OSError, ValueError):
        source = None
    mark = {"format": FORMAT, "source": source, "versions": library_versions(), **inputs}
    return json.loads(json.dumps(mark))


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def is_complete(folder: Path, mark: dict) -> bool:
    """Whether `folder` holds a model stored with key `mark`, every file of it whole (the size and
    SHA-256 its marker recorded). A key whose source marker was unreadable matches nothing."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text())
        files = marker["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if mark.get("source") is None or marker.get("built_from") != mark or not isinstance(files, dict) or not files:
        return False
    for name, want in files.items():
        path = Path(folder) / name
        try:
            if path.stat().st_size != want["size"] or file_digest(path) != want["sha256"]:
                return False
        except (OSError, KeyError, TypeError):
            return False
    return True


def save_folder(folder: Path, mark: dict, write: Callable[[Path], None]) -> None:
    """`write(partial)` fills a `.<name>.partial` folder; the marker (key, size and SHA-256 of every
    file) goes in last, then the folder is renamed into place: an interrupted write never looks
    complete. A cache that cannot be written is not an error: the model is simply rebuilt next time."""
    folder = Path(folder)
    partial = folder.with_name(f".{folder.name}.partial")
    try:
        for stale in (partial, folder):
            if stale.exists():
                shutil.rmtree(stale)
        partial.mkdir(parents=True)
        write(partial)
        files = {p.name: {"size": p.stat().st_size, "sha256": file_digest(p)} for p in sorted(partial.iterdir()) if p.is_file()}
        (partial / MARKER).write_text(json.dumps({"built_from": mark, "files": files}, indent=1))
        os.replace(partial, folder)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)


# --- draft variants on disk -----------------------------------------------------------------------


def variant_folder(draft_dir: Path, name: str) -> Path:
    return Path(draft_dir).with_name(f"{Path(draft_dir).name}.{name}")


def variant_mark(draft_dir: Path, recipe, ids: torch.Tensor | None) -> dict:
    """What a quantized variant is built from: the converted draft, the recipe, the quantizer's own
    parameters, and the token ids its truncated head keeps (SHA-256 of them; None: all)."""
    subset = None if ids is None else hashlib.sha256(ids.to(torch.int64).contiguous().numpy().tobytes()).hexdigest()
    return built_from(draft_dir, recipe=asdict(recipe), quantizer=quantizer_parameters(), subset=subset)


def save_variant(folder: Path, mark: dict, name: str, layout: dict, tensors: dict) -> None:
    from safetensors.torch import save_file

    def write(partial: Path) -> None:
        save_file({k: v.contiguous() for k, v in tensors.items()}, partial / "variant.safetensors")
        (partial / "layout.json").write_text(json.dumps({"variant": name, "layout": layout}, indent=1))

    save_folder(folder, mark, write)


def load_folder(folder: Path, base_dir: Path, dtype: torch.dtype, device: torch.device) -> nn.Module:
    from safetensors.torch import load_file
    from transformers import AutoConfig

    layout = json.loads((folder / "layout.json").read_text())["layout"]
    tensors = load_file(folder / "variant.safetensors")
    config = AutoConfig.from_pretrained(base_dir)  # the variant needs the model's shape, not its weights
    return assemble(config, layout, tensors, dtype, device)
