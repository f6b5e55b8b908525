"""Command-line options shared by `generate` and `bench`, and loading the pair they name.

Kept apart from __main__ (which dispatches) and bench (which runs), so neither imports the other.
What an option leaves unsaid starts where the page starts: the machine's defaults for the pair
(specdec.serving.defaults_here.start_defaults: measured here, else specdec.kernels.machine_defaults;
target kernel, draft variant, drafter, runner, K policy) and
GenerationConfig's own (K, sampling).
"""

from __future__ import annotations

import argparse

from specdec.core.config import DRAFTERS, K_POLICIES, MAX_K, RUNNERS, GenerationConfig
from specdec.core.variant_names import ALIASES, needs_w8a8
from specdec.kernels import device_offer, w8a8_build
from specdec.kernels.machine_defaults import SAFE
from specdec.models.presets import DEFAULT_PAIR, PRESETS

START = GenerationConfig()  # the settings a run starts on where neither an option nor the machine's defaults say


OLD_NAMES = ", ".join(f"{old} is read as {new}" for old, new in ALIASES.items())  # the names before today's


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=None, help=f"preset: {', '.join(PRESETS)} (default: $SPECDEC_PAIR or {DEFAULT_PAIR})")
    p.add_argument("--target", help="target model: Hub id or local folder (instead of --pair)")
    p.add_argument("--draft", help="draft model: Hub id or local folder (with --target)")
    p.add_argument("--device", help="cpu, cuda, or auto: spread the models over all GPUs (default: cuda when available)")
    p.add_argument("--dtype", choices=["bf16", "fp32", "fp16"], help="default: $SPECDEC_DTYPE, else bf16 where the hardware runs it natively, else fp32")


def add_variant_arg(p: argparse.ArgumentParser, several: bool = False) -> None:
    more = "; comma-separated to compare several side by side" if several else ""
    p.add_argument("--draft-variant", help=f"the draft as run: {', '.join(device_offer.draft_variants(None).names)} (default: this machine's, "
                                           f"as on the page{more}; {OLD_NAMES})")


def add_k_policy_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k-policy", choices=K_POLICIES, default=None,
                   help="how K is chosen each step (default: this machine's, as on the page): fixed; adaptive: +2 after a fully accepted draft, -1 otherwise; "
                        "cost: the K (0 = no drafting) with the most predicted tokens/s from this machine's pass costs "
                        "(measured once, cached) and the acceptance so far")


def add_kernel_arg(p: argparse.ArgumentParser, several: bool = False) -> None:
    more = "; comma-separated to run the modes once per kernel" if several else ""
    p.add_argument("--target-kernel", default=None,
                   help=f"the target as run: {', '.join(device_offer.target_kernels(None).names)} (dense: the target as loaded; "
                        f"default: this machine's, as on the page{more}; {OLD_NAMES})")


def add_runner_arg(p: argparse.ArgumentParser, several: bool = False) -> None:
    more = "; comma-separated to run our modes once per runner" if several else ""
    p.add_argument("--runner", default=None,
                   help=f"how the passes run: {', '.join(RUNNERS)} (eager: transformers' ops in a lean pass, a growing cache; static: a preallocated cache, "
                        f"fixed shapes, one read from the device per step; compiled: static with its passes captured, CUDA graphs "
                        f"on a GPU, torch.compile on a CPU). Default: this machine's, as on the page{more}")


def add_generation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", default=None, choices=DRAFTERS, help="model: draft model; lookup: prompt n-grams; head: the trained head "
                   "(docs/head.md); auto: lookup, else model; auto_head: lookup, else head; "
                   "auto_both: lookup, else the head or the model, whichever the cost K policy prices faster; "
                   "none: plain decoding (default: this machine's, as on the page)")
    p.add_argument("--k", type=int, default=START.k, help=f"draft length, 1..{MAX_K}")
    add_k_policy_arg(p)
    p.add_argument("--adaptive", action="store_true", help="the same as --k-policy adaptive")
    p.add_argument("--draft-confidence", type=float, default=START.draft_confidence, help="stop drafting when the draft's top probability falls below this (0 = off)")
    add_variant_arg(p)
    add_kernel_arg(p)
    add_runner_arg(p)
    p.add_argument("--temperature", type=float, default=START.temperature, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=START.top_p)
    p.add_argument("--top-k", type=int, default=START.top_k)
    p.add_argument("--max-new-tokens", type=int, default=START.max_new_tokens)
    p.add_argument("--seed", type=int, default=START.seed)
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None, help="wrap the prompt in the chat template (default: the preset's choice)")


def check_names(args) -> None:
    """The names the options give (runners, kernels, draft variants), checked before the models load."""
    runner_names(args), kernel_names(args), variant_names(args)


def generation_config(args, pair) -> GenerationConfig:
    """The one run the options describe, for the loaded `pair`; what they leave out is this machine's
    default for the pair, as on the page. Not checked here: build_decoding checks a run's settings
    when it builds the run (ValueError names a bad one)."""
    start = start_defaults(pair.name, pair.device)
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens, k=args.k, k_policy=k_policy_of(args, start.k_policy),
        draft_confidence=args.draft_confidence, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        seed=args.seed, drafter=args.drafter or start.drafter,
        draft_variant=only(variant_names(args, pair), "--draft-variant", "draft variant"),
        target_kernel=only(kernel_names(args, pair), "--target-kernel", "target kernel"),
        runner=only(runner_names(args, pair), "--runner", "runner"),
    )


def only(names: list[str], option: str, what: str) -> str:
    """The one name an option of a single run gives."""
    if len(names) != 1:
        raise ValueError(f"generate runs one {what}; {option} takes one name here")
    return names[0]


def k_policy_of(args, default: str = "fixed") -> str:
    """--k-policy, with --adaptive as its older spelling (both given must agree); `default` when neither is given."""
    chosen = getattr(args, "k_policy", None)
    if getattr(args, "adaptive", False):
        if chosen not in (None, "adaptive"):
            raise ValueError(f"--adaptive means --k-policy adaptive, and --k-policy {chosen} was given too")
        return "adaptive"
    return chosen or default


def variant_names(args, pair=None) -> list[str]:
    """--draft-variant as a list (validated), or this machine's default for the pair (nothing before
    a pair is loaded)."""
    from specdec.kernels.variants import parse_variant

    given = [parse_variant(v.strip()).name for v in (args.draft_variant or "").split(",") if v.strip()]  # old names as today's
    names = given or ([start_defaults(pair.name, pair.device).draft_variant] if pair is not None else [])
    if any(needs_w8a8(name) for name in names):
        w8a8_build.require(pair.device if pair is not None else None)  # told why before anything is built
    return names


def runner_names(args, pair=None) -> list[str]:
    """--runner as a list (validated), or the measured default for the pair's device (eager before
    a pair is loaded)."""
    from specdec.core.config import parse_runner

    given = [parse_runner(r.strip()) for r in (getattr(args, "runner", None) or "").split(",") if r.strip()]
    return list(dict.fromkeys(given)) or [start_defaults(pair.name, pair.device).runner if pair is not None else SAFE.runner]


def kernel_names(args, pair=None) -> list[str]:
    """--target-kernel as a list of names (validated), or this machine's default for the pair (the
    dense target before a pair is loaded)."""
    from specdec.core.variant_names import parse_kernel

    given = [parse_kernel(k.strip()) for k in (getattr(args, "target_kernel", None) or "").split(",") if k.strip()]
    chosen = start_defaults(pair.name, pair.device).target_kernel if pair is not None else SAFE.target_kernel
    names = list(dict.fromkeys(given)) or [chosen]
    if any(needs_w8a8(k) for k in names):
        w8a8_build.require()  # a machine that cannot run it is told why before anything is built
    return names


def start_defaults(pair_name: str, device):
    """What this machine starts the pair on (specdec.serving.defaults_here: measured here, else the recorded table)."""
    from specdec.serving.defaults_here import start_defaults as measured_or_recorded

    return measured_or_recorded(pair_name, device)


def load(args):
    from specdec.models.pair import load_pair

    if args.draft and not args.target:
        raise ValueError("--draft needs --target (or use --pair)")
    if args.pair and args.target:
        raise ValueError("give either --pair or --target, not both")
    return load_pair(args.pair, target=args.target, draft=args.draft, device=args.device, dtype=args.dtype)


def add_lock_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-lock", action="store_true",
                   help="do not wait for another measurement on this machine (the lock file under the cache): for runs whose timings do not matter")
