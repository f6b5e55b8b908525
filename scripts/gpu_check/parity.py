"""Greedy parity of the static and compiled runners with eager decoding: tiny-random in fp32 on the
device, each runner's events against eager's. Where the emitted tokens part, the first difference
and the target's top-2 margin there (measure.compare.first_difference): a margin below the fp32 tie
threshold is rounding in another order of sums, a larger one is a bug.

Then the path ZeroGPU runs: the same pair built on the CPU and moved to the device as the app's
start-up moves it there (specdec.serving.startup.place), every runner against the eager events
of the pair made on the device. Each row names the attention the target ran
(specdec/kernels/attention.py: the device's, whichever way the pair got there)."""

from __future__ import annotations

from dataclasses import replace

from specdec.core.config import GenerationConfig
from specdec.engines.assemble import build_decoding
from specdec.measure.compare import first_difference
from specdec.models.pair import build_pair, load_pair
from specdec.serving.startup import place

CONFIGS = {
    "greedy k=4": GenerationConfig(k=4, max_new_tokens=40),
    "auto k=4": GenerationConfig(k=4, drafter="auto", max_new_tokens=40),
    "early stop k=6": GenerationConfig(k=6, draft_confidence=0.5, max_new_tokens=40),
    "adaptive": GenerationConfig(k=2, k_policy="adaptive", k_max=8, max_new_tokens=40),
}
PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"


def parity(args) -> dict:
    """Per settings and runner: the same events (ids, counts, kinds) or not, the largest difference
    of p, q and margins, and the first difference of the emitted tokens (None: the same)."""
    pair = load_pair("tiny-random", device=str(args.device), dtype="fp32")
    moved = build_pair("tiny-random", device="cpu", dtype="fp32")
    place(moved, args.device)
    ids = pair.encode_prompt(PROMPT, chat=False, max_new_tokens=40)
    out = {}
    for label, config in CONFIGS.items():
        eager = list(build_decoding(pair, ids, config))
        for runner in args.runners[1:]:
            out[f"{label} {runner}"] = compared(pair, ids, replace(config, runner=runner), eager)
        for runner in args.runners:
            out[f"{label} {runner}, built on cpu and moved"] = compared(moved, ids, replace(config, runner=runner), eager)
    return out


def compared(pair, ids, config, eager: list) -> dict:
    """The pair's run with `config` against the eager events."""
    other = list(build_decoding(pair, ids, config))
    differ = first_difference(other, eager, "fp32")
    return {"same_events": decisions(eager) == decisions(other), "max_float_difference": float_difference(eager, other),
            "first_difference": differ.as_dict() if differ else None,
            "attention": pair.target.config._attn_implementation}


def decisions(events) -> list:
    return [(e.drafted, e.accepted, e.emitted, e.kind) for e in events]


def float_difference(a, b) -> float:
    return max((abs(x - y) for e, o in zip(a, b) for f in ("p_target", "p_draft", "margins")
                for x, y in zip(getattr(e, f), getattr(o, f))), default=0.0)
