"""A GGUF dequantised into a folder that from_pretrained loads: config, tokenizer, bf16 safetensors.

transformers' GGUF loader reads the file; a model loaded from GGUF refuses save_pretrained, so its
config and weights are written directly. Imports torch and transformers only when called.
"""

from __future__ import annotations

from pathlib import Path

from specdec.models.bundle_chunks import BundleError, BundleModel


def convert_gguf(gguf: Path, out: Path, model: BundleModel) -> None:
    """Dequantise the GGUF into `out` as a folder from_pretrained loads: config, tokenizer, bf16 weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise BundleError(f"The {model.title} GGUF has no chat template; the instruct model needs one.")
    # dequantize=True: plain dense tensors, even where a GGUF matmul kernel would keep them packed
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, quantization_config=GgufConfig(dequantize=True)
    )
    if model.eos_token_ids:
        loaded.generation_config.eos_token_id = list(model.eos_token_ids)
    save_dense(loaded, out)
    tokenizer.save_pretrained(out)


def save_dense(model, out: Path) -> None:
    """Write config, generation_config and model.safetensors directly: a GGUF-loaded model refuses
    save_pretrained. Tied output embeddings are stored once and re-tied on load via the config."""
    from safetensors.torch import save_file

    head = model.get_output_embeddings()
    tied = head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    config = model.config
    if hasattr(config, "quantization_config"):  # the weights written are dense; no quantizer on reload
        del config.quantization_config
    config.tie_word_embeddings = tied
    config.dtype = model.dtype
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    if tied:  # safetensors refuses two names for one storage
        head_name = next(n for n, m in model.named_modules(remove_duplicate=False) if m is head)
        del state[f"{head_name}.weight"]
    save_file(state, out / "model.safetensors", metadata={"format": "pt"})
