"""Which presets visitors may pick on this machine, which one is the default, and why.

The operator lists the presets on offer ($SPECDEC_PAIRS) and may name the default ($SPECDEC_PAIR).
Left unset, the offer is what this machine can load without a download, plus the Hub presets that
fit the device when it is online; the default is the embedded pair on a CPU, and on a GPU the
largest offered pair that fits its memory. On ZeroGPU a pair must be placed on the GPU when the
app starts (serving.startup), so only the pairs loaded then are offered: the default alone unless
$SPECDEC_PAIRS lists more. Every preset left out carries its reason, for the page and the log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from specdec.models import bundle, machine
from specdec.models.pair import pick_device, pick_dtype
from specdec.models.presets import DEFAULT_PAIR, PRESETS, PairPreset, get_preset
from specdec.serving import gpu_budget

PAIRS_ENV = "SPECDEC_PAIRS"  # comma-separated preset names visitors may pick
PAIR_ENV = "SPECDEC_PAIR"  # the default preset
GB = 1 << 30
# Resident bytes per weight byte, with room to spare: the whole app with the embedded pair (4.5 GiB of
# bf16 weights) measured 4.6-4.7 GiB resident over 30 runs (docs/reliability.md).
LOAD_FACTOR = 1.15
RUNTIME_BYTES = GB // 2  # KV caches and activations of one run at the longest context, rounded up
FIT_SHARE = 0.8  # a Hub preset is offered when it needs at most this share of the device's memory
# On a GPU the card holds the pair and nothing else of the app's: the weights land byte for byte,
# beside CUDA's context, the caching allocator's slack, one run's caches and activations (estimates).
GPU_RUNTIME_BYTES = 2 * GB
GPU_FIT_SHARE = 0.9
NOT_LOADED_AT_START = f"not loaded at start-up, when ZeroGPU takes the pairs it serves; name it in {PAIRS_ENV}"


def listed_pairs(environ=os.environ) -> list[str] | None:
    """$SPECDEC_PAIRS as preset names (None when unset); ValueError naming the unknown entries."""
    raw = environ.get(PAIRS_ENV, "").strip()
    if not raw:
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        raise ValueError(f"{PAIRS_ENV} names unknown presets {', '.join(map(repr, unknown))}; known: {', '.join(PRESETS)}")
    return list(dict.fromkeys(names))


def operator_default(environ=os.environ) -> tuple[str | None, str]:
    """The default the operator named ($SPECDEC_PAIR, else the first of $SPECDEC_PAIRS) and why;
    (None, "") when they named none."""
    name = environ.get(PAIR_ENV, "").strip()
    if name:
        get_preset(name)  # ValueError naming the field for an unknown name
        return name, f"${PAIR_ENV}"
    listed = listed_pairs(environ)
    return (listed[0], f"the first of ${PAIRS_ENV}") if listed else (None, "")


def default_pair(environ=os.environ) -> str:
    """$SPECDEC_PAIR, else the first entry of $SPECDEC_PAIRS, else the project default."""
    return operator_default(environ)[0] or DEFAULT_PAIR


def is_online(environ=os.environ) -> bool:
    return environ.get("HF_HUB_OFFLINE", "").strip().upper() not in ("1", "ON", "YES", "TRUE")


def in_hub_cache(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds the repo's config and weights (no network)."""
    from huggingface_hub import try_to_load_from_cache

    def cached(filename: str) -> bool:
        return isinstance(try_to_load_from_cache(repo_id, filename), str)

    return cached("config.json") and (cached("model.safetensors") or cached("model.safetensors.index.json"))


def loads_without_download(preset: PairPreset) -> bool:
    """Built in code, the embedded bundle (installed or already converted), or both models in the local cache."""
    if preset.name == "tiny-random":
        return True
    if preset.bundle and (bundle.bundle_available(preset.bundle) or bundle.is_converted(preset.bundle)):
        return True
    return in_hub_cache(preset.target_id) and in_hub_cache(preset.draft_id)


def needed_bytes(preset: PairPreset, dtype: torch.dtype, on_gpu: bool = False) -> int:
    """Memory a loaded pair takes: its weights in `dtype`, plus one run's caches; in RAM with the
    slack measured for the whole app, on a GPU with CUDA's own."""
    if preset.name == "tiny-random":
        return 64 << 20
    weight_bytes = preset.params_b * 1e9 * torch.finfo(dtype).bits / 8
    if on_gpu:
        return int(weight_bytes) + GPU_RUNTIME_BYTES
    return int(weight_bytes * LOAD_FACTOR) + RUNTIME_BYTES


def fits(need: int, total: int, on_gpu: bool) -> bool:
    return need <= (GPU_FIT_SHARE if on_gpu else FIT_SHARE) * total


def memory(device: torch.device) -> tuple[int | None, int | None]:
    """(free, total) bytes of the device's memory, None where they cannot be read. In a ZeroGPU
    app's process `spaces` answers for the whole card from its own table (no CUDA call)."""
    try:
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            return int(free), int(total)
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)
    except Exception:  # a device that cannot say
        return None, None


def pair_memory(device: torch.device, environ=os.environ) -> tuple[int | None, str]:
    """(bytes one pair may live in, what they are called): the device's memory; on ZeroGPU the
    share of the card that one GPU call gets."""
    total = memory(device)[1]
    if total is not None and device.type == "cuda" and machine.zero_gpu(environ):
        size = gpu_budget.gpu_size(environ) or "large"
        return int(total * gpu_budget.card_share(environ)), f"a ZeroGPU call ({size})"
    return total, f"the {device.type}"


@dataclass(frozen=True)
class Offer:
    default: str
    names: tuple[str, ...]  # what the dropdown lists, the default first
    hidden: dict[str, str] = field(default_factory=dict)  # preset -> why it is not offered
    why_default: str = ""  # why the default is the default

    def explain(self) -> str:
        """One line for the page: why this default, and every preset left out with its reason."""
        line = f"Default {self.default}" + (f": {self.why_default}." if self.why_default else ".")
        if self.hidden:
            line += " Not offered here: " + "; ".join(f"{name} ({why})" for name, why in self.hidden.items()) + "."
        return line


def offered_pairs(environ=os.environ, device: torch.device | None = None, dtype: str | None = None) -> Offer:
    """The presets visitors may pick on this machine; ValueError for an unknown name in the environment."""
    device = device or pick_device()
    dt = pick_dtype(device, dtype)
    listed = listed_pairs(environ)
    chosen, why_chosen = operator_default(environ)
    gpu = device.type == "cuda"
    if chosen is None and not gpu:
        chosen, why_chosen = DEFAULT_PAIR, "the project's default, made for a CPU"
    total, where = pair_memory(device, environ) if listed is None else (None, "")

    def why_hidden(preset: PairPreset) -> str | None:
        if preset.needs_gpu and not gpu:
            return "needs a GPU"
        if listed is not None or loads_without_download(preset):
            return None
        if not is_online(environ):
            return "not on this machine, and the Hub is offline"
        need = needed_bytes(preset, dt, gpu)
        if total is not None and not fits(need, total, gpu):
            share = GPU_FIT_SHARE if gpu else FIT_SHARE
            return f"needs about {need / GB:.1f} GB; {where} has {total / GB:.1f} GB, of which a pair may take {share:.0%}"
        return None

    candidates = [PRESETS[n] for n in listed] if listed is not None else list(PRESETS.values())
    hidden = {p.name: why for p in candidates if p.name != chosen and (why := why_hidden(p))}
    offered = [p for p in candidates if p.name not in hidden]
    fitting = [p for p in offered if total is not None and fits(needed_bytes(p, dt, gpu), total, gpu)]
    default, why_default = (chosen, why_chosen) if chosen else largest(fitting, total, where)
    hidden.pop(default, None)  # the default is offered even where it may fail to load: the page says why then
    if gpu and machine.zero_gpu(environ) and listed is None:
        hidden.update({p.name: NOT_LOADED_AT_START for p in offered if p.name != default})
    names = [default] + [p.name for p in candidates if p.name not in hidden and p.name != default]
    return Offer(default, tuple(names), hidden, why_default)


def largest(fitting: list[PairPreset], total: int | None, where: str) -> tuple[str, str]:
    """The GPU default: of the offered presets that fit (a local copy is offered without the check),
    the one with the most parameters; else the project default."""
    if total is None:
        return DEFAULT_PAIR, "the project's default (this GPU's memory could not be read)"
    if not fitting:
        return DEFAULT_PAIR, "the project's default (no other offered pair fits here)"
    best = max(fitting, key=lambda p: p.params_b)
    return best.name, f"the largest pair that fits {where}'s {total / GB:.1f} GB"
