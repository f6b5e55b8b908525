"""Command-line options shared by `generate` and `bench`, and loading the pair they name.

Kept apart from __main__ (which dispatches) and bench (which runs), so neither imports the other.
"""

from __future__ import annotations

import argparse
import os

from specdec.core.config import DRAFTERS, K_POLICIES, MAX_K, RUNNERS, GenerationConfig
from specdec.core.variant_names import needs_w8a8
from specdec.kernels import device_offer, w8a8_build
from specdec.kernels.variants import default_variant
from specdec.models.presets import DEFAULT_PAIR, PRESETS


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=None, help=f"preset: {', '.join(PRESETS)} (default: $SPECDEC_PAIR or {DEFAULT_PAIR})")
    p.add_argument("--target", help="target model: Hub id or local folder (instead of --pair)")
    p.add_argument("--draft", help="draft model: Hub id or local folder (with --target)")
    p.add_argument("--device", help="cpu, cuda, or auto: spread the models over all GPUs (default: cuda when available)")
    p.add_argument("--dtype", choices=["bf16", "fp32", "fp16"], help="default: $SPECDEC_DTYPE, else bf16 where the hardware runs it natively, else fp32")


def add_variant_arg(p: argparse.ArgumentParser, several: bool = False) -> None:
    more = "; comma-separated to compare several side by side" if several else ""
    p.add_argument("--draft-variant", help=f"the draft as run: {', '.join(device_offer.draft_variants(None).names)} (default: the measured default for this machine{more})")


def add_k_policy_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k-policy", choices=K_POLICIES, default=None,
                   help="how K is chosen each step: fixed (default); adaptive: +2 after a fully accepted draft, -1 otherwise; "
                        "cost: the K (0 = no drafting) with the most predicted tokens/s from this machine's pass costs "
                        "(measured once, cached) and the acceptance so far")


def add_kernel_arg(p: argparse.ArgumentParser, several: bool = False) -> None:
    more = "; comma-separated to run the modes once per kernel" if several else ""
    p.add_argument("--target-kernel", default="bf16",
                   help=f"the target as run: {', '.join(device_offer.target_kernels(None).names)} (default: bf16, the target as loaded{more})")


def add_runner_arg(p: argparse.ArgumentParser, several: bool = False) -> None:
    more = "; comma-separated to run our modes once per runner" if several else ""
    p.add_argument("--runner", default=None,
                   help=f"how the passes run: {', '.join(RUNNERS)} (eager: transformers as it is; static: a preallocated cache, "
                        f"fixed shapes, one read from the device per step; compiled: static with its passes captured, CUDA graphs "
                        f"on a GPU, torch.compile on a CPU). Default: the measured default for this machine{more}")


def add_generation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", default="model", choices=DRAFTERS, help="model: draft model; lookup: prompt n-grams; auto: lookup, else model; none: plain decoding")
    p.add_argument("--k", type=int, default=5, help=f"draft length, 1..{MAX_K}")
    add_k_policy_arg(p)
    p.add_argument("--adaptive", action="store_true", help="the same as --k-policy adaptive")
    p.add_argument("--draft-confidence", type=float, default=0.0, help="stop drafting when the draft's top probability falls below this (0 = off)")
    add_variant_arg(p)
    add_kernel_arg(p)
    add_runner_arg(p)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None, help="wrap the prompt in the chat template (default: the preset's choice)")


def generation_config(args, draft_variant: str = "bf16", runner: str | None = None) -> GenerationConfig:
    """The settings the options give. runner: the one to run (default: --runner, else eager; the
    caller passes runner_names' measured default once the pair is loaded)."""
    for name in (draft_variant, args.target_kernel):
        if needs_w8a8(name):
            w8a8_build.require()  # a machine that cannot run it is told why before anything loads
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens, k=args.k, k_policy=k_policy_of(args),
        draft_confidence=args.draft_confidence, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        seed=args.seed, drafter=args.drafter, draft_variant=draft_variant, target_kernel=args.target_kernel,
        runner=runner or (getattr(args, "runner", None) or "eager").strip(),
    ).validate()


def k_policy_of(args) -> str:
    """--k-policy, with --adaptive as its older spelling (both given must agree)."""
    chosen = getattr(args, "k_policy", None)
    if getattr(args, "adaptive", False):
        if chosen not in (None, "adaptive"):
            raise ValueError(f"--adaptive means --k-policy adaptive, and --k-policy {chosen} was given too")
        return "adaptive"
    return chosen or "fixed"


def variant_names(args, pair) -> list[str]:
    """--draft-variant as a list (validated), or the measured default for the pair on this machine."""
    from specdec.kernels.variants import parse_variant

    given = [v.strip() for v in (args.draft_variant or "").split(",") if v.strip()]
    for name in given:
        parse_variant(name)
        if needs_w8a8(name):
            w8a8_build.require(pair.device)
    return given or [default_variant(pair.name, pair.device)]


def runner_names(args, pair=None) -> list[str]:
    """--runner as a list (validated), or the measured default for the pair's device (eager before
    a pair is loaded)."""
    from specdec.core.config import parse_runner
    from specdec.kernels.runner_defaults import default_runner

    given = [parse_runner(r.strip()) for r in (getattr(args, "runner", None) or "").split(",") if r.strip()]
    return list(dict.fromkeys(given)) or [default_runner(pair.device) if pair is not None else "eager"]


def kernel_names(args) -> list[str]:
    """--target-kernel as a list of names (validated)."""
    from specdec.core.variant_names import parse_kernel

    given = [parse_kernel(k.strip()) for k in (getattr(args, "target_kernel", None) or "bf16").split(",") if k.strip()]
    if any(needs_w8a8(k) for k in given):
        w8a8_build.require()
    return list(dict.fromkeys(given)) or ["bf16"]


def load(args):
    from specdec.models.pair import load_pair

    if args.draft and not args.target:
        raise ValueError("--draft needs --target (or use --pair)")
    if args.pair and args.target:
        raise ValueError("give either --pair or --target, not both")
    return load_pair(args.pair, target=args.target, draft=args.draft, device=args.device, dtype=args.dtype)


def add_bench_command_args(p: argparse.ArgumentParser) -> None:
    """Every option of `bench` (also `python -m specdec.cli.bench`)."""
    from specdec.bench.modes import DEFAULT_MODES, MODES  # the names only: bench imports this module, not the reverse
    from specdec.models.dtypes import DTYPES

    p.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "..", "..", "assets", "bench_prompts.json"))
    add_model_args(p)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=1, help="alternating rounds per prompt")
    p.add_argument("--json", action="store_true")
    add_variant_arg(p, several=True)
    add_kernel_arg(p, several=True)
    add_runner_arg(p, several=True)
    p.add_argument("--draft-dtype", choices=list(DTYPES), help="the draft model's dtype (default: --dtype)")
    p.add_argument("--exact", action="store_true", help="target in fp32 for every mode (verification without bf16 rounding); draft keeps --draft-dtype")
    p.add_argument("--schedule", choices=["constant", "heuristic"], default="constant", help="K schedule of spec and hf_assisted")
    add_k_policy_arg(p)  # for `spec`, instead of --schedule; hf_assisted keeps --schedule
    p.add_argument("--modes", default=None,
                   help=f"comma-separated, from {', '.join(MODES)}; a draft-model mode may name its variant (spec@int4) "
                        f"(default: {','.join(DEFAULT_MODES)})")
    p.add_argument("--predictions", action="store_true",
                   help="instead of the modes: per prompt, spec's measured speedup over plain decoding (prompt processing excluded) "
                        "beside the three predictions of specdec.measure.metrics; one draft variant, kernel and runner; "
                        "exit status 1 if the accounting misses the measurement by more than 10%% on a prompt")
    add_lock_arg(p)


def add_lock_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-lock", action="store_true",
                   help="do not wait for another measurement on this machine (the lock file under the cache): for runs whose timings do not matter")
