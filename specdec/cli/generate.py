"""`python -m specdec generate`: one prompt through this project's engine (specdec.engines.ours), the
accepted and rejected draft tokens in colour, then one line (or one JSON object) on the run, beside
plain decoding and the lossy int4 lane when asked.

The way to the first model pass: this module -> OurSource -> build_decoding (the settings checked,
the run's parts built) -> the loop (specdec.core.decoding) -> the runner -> the model.
"""

from __future__ import annotations

import argparse
import json

from specdec.cli.args import add_generation_args, add_model_args, check_names, generation_config, load
from specdec.core.events import BONUS, CORRECTION, StepEvent
from specdec.engines.assemble import prepare
from specdec.engines.ours import OurSource

ANSI = {
    "accepted": "\033[32m",  # green
    "rejected": "\033[9;31m",  # red, struck through
    CORRECTION: "\033[33m",  # amber
    BONUS: "\033[34m",  # blue
}
RESET = "\033[0m"


def add_generate_command(sub) -> None:
    g = sub.add_parser("generate", help="generate text and show which draft tokens were accepted")
    g.add_argument("--prompt", required=True)
    add_model_args(g)
    add_generation_args(g)
    g.add_argument("--compare", action="store_true", help="also run plain decoding and compare outputs and speed")
    g.add_argument("--plain-int4", action="store_true", help="also run plain decoding with an int4-quantized target (lossy) and say where it departs")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--record", metavar="PATH", help="also write the run record (JSON) that the app's 'Load a run' shows")
    g.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    check_names(args)  # a misspelt kernel, variant or runner is named before the models load
    pair = load(args)
    config = generation_config(args, pair)
    prepare(pair, config, progress=True)  # a cost table is cached, or measured now with a progress bar (the run would measure it silently)
    result = OurSource(pair, config).side_by_side(args.prompt, chat=args.chat, plain=args.compare, lossy=args.plain_int4)
    if args.record:
        write_record(args.record, args.prompt, result)
    if args.json:
        print(json.dumps(result.as_json(), ensure_ascii=False))
        return 0
    print(colour_events(result.spec_events))
    print(result.summary_line())
    return 0


def write_record(path: str, prompt: str, result) -> None:
    """The run record (specdec.record.run_file) that the app's 'Load a run' shows."""
    from specdec.measure.metrics import FROM_ONE_TOKEN_PASS
    from specdec.record.run_file import RunRecord, machine_info, now_utc, pair_info, to_json

    timed_after = result.spec.decode_step_from == FROM_ONE_TOKEN_PASS  # no plain run: the step timed after it
    record = RunRecord(prompt=prompt, config=result.config, pair=pair_info(result.pair), machine=machine_info(result.pair),
                       spec=result.spec_events, plain=result.plain_events or [], created=now_utc(),
                       decode_step_s=result.spec.decode_step_s if timed_after else None)
    with open(path, "w", encoding="utf-8") as f:
        f.write(to_json(record))


def colour_events(events: list[StepEvent], show_rejected: bool = True) -> str:
    out = []
    for e in events:
        out += [ANSI["accepted"] + t + RESET for t in e.emitted_text[: e.accepted]]
        if show_rejected:
            out += [ANSI["rejected"] + t + RESET for t in e.drafted_text[e.accepted :]]
        if len(e.emitted) > e.accepted:
            out.append(ANSI.get(e.kind, "") + e.emitted_text[-1] + (RESET if e.kind in ANSI else ""))
    return "".join(out)
