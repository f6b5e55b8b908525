"""Target kernels: which weights and matrix kernels run the target, named like draft variants.

The target decides the output, so a kernel here is a different model only where its weights differ;
speculative and plain decoding on one kernel emit the same tokens (up to reported ties), as ever.

- `dense` (called `bf16` before, still read so): the dense target as loaded, in the pair's dtype:
  the GGUF's weights dequantized and stored in bf16 by the conversion. The pair's dtype is bf16
  where the CPU runs it natively (AVX-512 BF16, AMX) and fp32 otherwise (an AVX2-only CPU), so on
  AVX2 this kernel runs fp32.
- `int8`: every linear layer, the head and the embedding table weight-only int8 with one scale
  per row (specdec/kernels/quant.py, torch's `_weight_int8pack_mm`), quantized from the dense target:
  the same recipe and disk cache as the int8 target lane of specdec/kernels/variants.py.
- `q4k`: the GGUF's Q4_K tensors straight into torch's CPU int4 kernel on their own grid
  (specdec/kernels/q4k.py), nothing re-quantized; the GGUF's Q6_K tensors (the output head, half of
  `ffn_down` and `attn_v`) dense in the pair's dtype; the token embedding (Q4_K) dequantized row
  by row on lookup. Pairs without a GGUF (tiny-random, Hub models) get Q4_K bytes written by
  specdec/q4k.quantize from their dense weights, then the same loading path.

- `w8a8`: every linear layer and the head (apart from the embedding, even where they are tied) with
  int8 weights per output channel and int8 activations quantized per block of each row on every call, in this
  project's own kernel (specdec/kernels/w8a8.py): a row's output does not depend on the other rows
  of its pass, so checking K+1 tokens costs little more than one and stays exact. The embedding
  table is weight-only int8; the rest of the model keeps the pair's dtype. Offered only where the
  kernel runs (specdec/kernels/device_offer.py; specdec/kernels/w8a8_build.py says why not elsewhere).
- `w4a8`: the q4k kernel's weights (the GGUF's Q4_K tensors on their own grid, the same stored state)
  with int8 activations per block of each row, in this project's own kernel (specdec/kernels/w4a8.py):
  exact per row like w8a8, at about half its bytes for the Q4_K layers. The GGUF's Q6_K tensors (the
  head, half of `ffn_down` and `attn_v`) run on the W8A8 kernel, int8 per channel from their exact
  values; the Q4_K embedding is read row by row on lookup. Offered where w8a8 is (the same library).

Quantized weight-only kernels compute their matrix products with bf16 activations on a CPU (ACTIVATION):
torch's int8 and int4 CPU kernels are much slower with fp32 activations, on AVX2 as on AVX-512 BF16
(measured, docs/benchmarks.md "Target kernels"). The rest of the model keeps the pair's dtype.

Built kernels are kept per pair (`pair.built.kernels[<name>]`) and stored once beside the
converted target (`<target folder>.<kernel>/`), keyed on what they were built from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from specdec.core.variant_names import DENSE, native_kernel, parse_kernel
from specdec.kernels import w8a8_build
from specdec.kernels.batch_invariant import invariant_kernel, make_batch_invariant
from specdec.models import machine

FORMAT = 1  # layout of a stored q4k kernel; bump it to have old ones rebuilt

# Activation dtype of the quantized kernels by kind of machine (specdec.models.machine.machine_kind), measured
# per machine (docs/benchmarks.md, "Target kernels"); a machine not listed takes bf16 on a CPU.
ACTIVATION = {"cpu-avx2": torch.bfloat16, "cpu-avx512_bf16": torch.bfloat16}


def kernel_target(pair, name: str) -> nn.Module:
    """The target of `pair` as run by kernel `name`: the pair's own, kept from before, loaded from
    the disk cache, or built (and stored). Batch-invariant where specdec/kernels/batch_invariant.py
    says the kernel can be (a check gives each row a one-token pass's bits)."""
    name = parse_kernel(name)  # an old name read as today's
    if name == DENSE:
        model = pair.target
    else:
        if native_kernel(name):
            w8a8_build.require_for(name, pair.device)
        kernels = pair.built.kernels
        if name not in kernels:
            built = {"int8": _build_int8, "q4k": _build_q4k, "w8a8": _build_w8a8, "w4a8": _build_w4a8}[name](pair)
            built.generation_config = pair.target.generation_config  # the pair's end-of-sequence ids
            kernels[name] = built
        model = kernels[name]
    if invariant_kernel(name, pair.dtype_name, pair.device):
        make_batch_invariant(model)  # idempotent
    return model


def release(pair, keep: str | None = None) -> None:
    """Drop every built kernel model but `keep` from the pair (the bench keeps one at a time)."""
    for name in [k for k in pair.built.kernels if k != keep]:
        del pair.built.kernels[name]


def activation_dtype(pair) -> torch.dtype:
    if pair.device.type != "cpu":
        return pair.dtype
    return ACTIVATION.get(machine.machine_kind(pair.device), torch.bfloat16)


def _build_int8(pair) -> nn.Module:
    from specdec.kernels.variants import parse_variant, quantized_model

    return quantized_model(pair.target, pair.target_dir, parse_variant("int8"), None, activation_dtype(pair), pair.device)


def _build_w8a8(pair) -> nn.Module:
    """The draft variants' quantizer and disk cache (`<target folder>.w8a8/`, keyed and verified by
    specdec/kernels/variant_store.py) with the w8a8 recipe, in the pair's dtype."""
    from specdec.kernels.variants import parse_variant, quantized_model

    return quantized_model(pair.target, pair.target_dir, parse_variant("w8a8"), None, pair.dtype, pair.device)


# --- q4k ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Q4KRecipe:
    """What a stored q4k kernel was built from: a different value rebuilds it."""

    source: str  # sha256 of the GGUF, or "dense" (specdec/q4k.quantize of the converted weights)
    format: int  # FORMAT
    torch: str  # torch version (the stored tensors are torch's)
    gguf: str  # gguf package version (it reads the file and dequantizes the Q6_K tensors)
    quantizer: str  # how Q4_K bytes were obtained: "gguf" (as stored) or "q4k.quantize"


def target_gguf(pair) -> Path | None:
    """The GGUF the pair's target was converted from (the embedded bundle), or None."""
    if pair.source != "embedded bundle" or pair.target_dir is None:
        return None
    from specdec.models.bundle import gguf_files

    return gguf_files()[0]


def _build_q4k(pair, kernel: str = "q4k") -> nn.Module:
    """The GGUF's Q4_K state (stored once beside the converted target), or Q4_K bytes from the dense
    weights where there is no GGUF, assembled for `kernel` (q4k or w4a8: the same weights)."""
    path = target_gguf(pair)
    if path is None:  # no GGUF: Q4_K bytes from the dense weights, in memory
        layout, tensors = dense_q4k_state(pair.target)
    else:
        layout, tensors = _stored(pair.target_dir, _recipe(path), lambda: gguf_q4k_state(path))
    return assemble_q4k(pair.target.config, layout, tensors, pair.dtype, activation_dtype(pair), pair.device, kernel)


def _build_w4a8(pair) -> nn.Module:
    return _build_q4k(pair, "w4a8")


def _recipe(path: Path) -> Q4KRecipe:
    import gguf

    from specdec.models.bundle import BUNDLE_NAME, bundle_models

    try:
        from importlib.metadata import version

        gguf_version = version("gguf")
    except Exception:  # noqa: BLE001 - a version we cannot read is simply part of the key
        gguf_version = getattr(gguf, "__version__", "unknown")
    return Q4KRecipe(bundle_models(BUNDLE_NAME)[0].sha256, FORMAT, torch.__version__, gguf_version, "gguf")


# The disk cache: the one place that calls specdec/variant_store's cache functions for kernels.
def _stored(target_dir: Path, recipe: Q4KRecipe, build) -> tuple[dict, dict]:
    """(layout, tensors) from `<target folder>.q4k/` when complete (every file whole) and built from
    `recipe` and the converted copy as it is now; else built and stored (specdec.kernels.variant_store keys it)."""
    import json
    from dataclasses import asdict

    from safetensors.torch import load_file

    from specdec.kernels.variant_store import built_from, is_complete, save_variant, variant_folder

    folder = variant_folder(target_dir, "q4k")
    mark = built_from(target_dir, recipe=asdict(recipe))
    if is_complete(folder, mark):
        layout = json.loads((folder / "layout.json").read_text())["layout"]
        return layout, load_file(folder / "variant.safetensors")
    layout, tensors = build()
    save_variant(folder, mark, "q4k", layout, tensors)
    return layout, tensors


# GGUF tensor names -> transformers' Qwen2 names (transformers' own GGUF loader maps them so; llama.cpp
# permutes q/k rows only for llama-family architectures, not qwen2: checked against the converted copy).
_GGUF_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_GGUF_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def hf_name(gguf_name: str) -> str:
    """`blk.0.attn_q.weight` -> `model.layers.0.self_attn.q_proj.weight`."""
    base, _, leaf = gguf_name.rpartition(".")
    if base.startswith("blk."):
        _, layer, part = base.split(".", 2)
        return f"model.layers.{layer}.{_GGUF_NAMES[part]}.{leaf}"
    return f"{_GGUF_TOP[base]}.{leaf}"


def gguf_q4k_state(path: Path) -> tuple[dict, dict]:
    """Read the GGUF: Q4_K tensors as their raw blocks (`<module>.blocks`, (rows, n*144) uint8),
    every other tensor dequantized to float32 by the gguf package, under transformers' names."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(path))
    layout, tensors = {}, {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if t.tensor_type == gguf.GGMLQuantizationType.Q4_K:
            module = name.rsplit(".", 1)[0]
            kind = "q4k_embedding" if module == "model.embed_tokens" else "q4k_linear"
            layout[module] = {"kind": kind, "cols": int(t.shape[0])}  # gguf lists the row width first
            tensors[f"{module}.blocks"] = torch.from_numpy(np.array(t.data))
        else:
            tensors[name] = torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32))
    return layout, tensors


def dense_q4k_state(model: nn.Module) -> tuple[dict, dict]:
    """Q4_K bytes (specdec/q4k.quantize) for every linear layer the int4 kernel takes and for the
    embedding table; everything else as it is. Tied head and embedding are quantized apart."""
    from specdec.kernels import q4k

    embedding = model.get_input_embeddings()
    layout, tensors = {}, {}
    for name, module in model.named_modules():
        if module is embedding:
            layout[name] = {"kind": "q4k_embedding", "cols": module.weight.shape[1]}
            tensors[f"{name}.blocks"] = q4k.quantize(module.weight)
        elif isinstance(module, nn.Linear) and q4k.kernel_fits(*module.weight.shape):
            layout[name] = {"kind": "q4k_linear", "cols": module.weight.shape[1]}
            tensors[f"{name}.blocks"] = q4k.quantize(module.weight)
            if module.bias is not None:
                tensors[f"{name}.bias"] = module.bias.detach()
    for key, value in model.state_dict().items():
        if key.rsplit(".", 1)[0] not in layout:
            tensors.setdefault(key, value)
    return layout, tensors


def assemble_q4k(config, layout: dict, tensors: dict, dtype: torch.dtype, compute: torch.dtype, device: torch.device,
                 kernel: str = "q4k") -> nn.Module:
    """The model from its stored form without a dense copy of the Q4_K weights: a skeleton on the
    meta device, Q4_K modules built from their blocks, everything else assigned in `dtype`. kernel
    "w4a8": the Q4_K linear layers on the W4A8 kernel, every other linear layer (the GGUF's Q6_K
    tensors, dequantized) on the W8A8 kernel, int8 per output channel."""
    from transformers import AutoModelForCausalLM

    from specdec.kernels.q4k import Q4KEmbedding, Q4KLinear
    from specdec.kernels.variant_store import fill_the_rest
    from specdec.kernels.w4a8 import W4A8Linear

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)  # its own: see variant_store.assemble
    if "lm_head.weight" in tensors or "lm_head" in layout:  # the GGUF stores its own head: untie it
        model.config.tie_word_embeddings = False
        model.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False, device="meta")
    for name, entry in layout.items():
        blocks, cols = tensors[f"{name}.blocks"], entry["cols"]
        if entry["kind"] == "q4k_embedding":
            module = Q4KEmbedding(blocks, cols, dtype, device)
        elif kernel == "w4a8":
            module = W4A8Linear(blocks, cols, tensors.get(f"{name}.bias"), device)
        else:
            module = Q4KLinear(blocks, cols, tensors.get(f"{name}.bias"), dtype, compute, device)
        model.set_submodule(name, module)
    if kernel == "w4a8":
        layout = {**layout, **_dense_on_w8a8(model, layout, tensors, device)}
    return fill_the_rest(model, layout, tensors, dtype, device, f"{kernel} target kernel")


def _dense_on_w8a8(model: nn.Module, layout: dict, tensors: dict, device: torch.device) -> dict:
    """Every linear layer still dense (not in `layout`) replaced by a W8A8 layer quantized from its
    stored weight; their layout entries (so that fill_the_rest leaves their tensors alone)."""
    from specdec.kernels.quant import quantize
    from specdec.kernels.w8a8 import W8A8Linear

    done = {}
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and name not in layout:
            weight, bias = tensors[f"{name}.weight"], tensors.get(f"{name}.bias")
            model.set_submodule(name, W8A8Linear(quantize(weight, 8), bias, device))
            done[name] = {"kind": "w8a8_linear"}
    return done
