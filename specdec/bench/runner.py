"""Speed benchmark: our plain and speculative decoding against transformers' assisted generation.

Every mode runs the same models on the same prompt ids with greedy decoding, so every mode should
emit the same tokens as plain decoding (up to numerical ties); `identical_to_plain` checks it.
Timing: wall time of the whole generate call, prompt prefill included, for every mode alike.
Runs alternate round-robin (plain, spec, best, hf_assisted, hf_lookup, plain, ...) so that load
from other processes spreads over all modes; each figure is the median over `--repeats` rounds.
Our modes run our engine's StepSource (specdec/engines/ours.py) with the settings of
specdec/bench/policies.py; transformers' are in specdec/bench/hf.py; a real engine's read its servers
(specdec/engines/bench_servers.py).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

from specdec.bench import faithful
from specdec.bench.hf import run_hf
from specdec.bench.modes import DEFAULT_MODES, DRAFT_MODES, MODES, OUR_MODES
from specdec.bench.policies import best_description, mode_config, split_mode
from specdec.bench.report import exactness, geomean, lanes_summary, summarize_results, table  # noqa: F401 (table: the report's text, beside bench)
from specdec.models.machine import machine_info
from specdec.core.config import GenerationConfig, parse_runner
from specdec.engines.bench_servers import OWN_PLAIN, SERVED, run_blocks, runs_as_block, servers_beside
from specdec.engines.assemble import prepare
from specdec.engines.ours import OurSource
from specdec.core.variant_names import DENSE, parse_kernel
from specdec.kernels.target_kernels import kernel_target, release
from specdec.serving.defaults_here import start_defaults
from specdec.kernels.variants import draft_model, parse_variant, resident_gb, target_model
from specdec.measure.metrics import summarize
from specdec.measure.positions import position_acceptance
from specdec.models.pair import ModelPair

DEFAULT_PROMPTS = os.path.join(os.path.dirname(__file__), "..", "..", "assets", "bench_prompts.json")


@dataclass
class Result:
    prompt: str  # prompt id
    mode: str
    tokens: int  # new tokens produced (an end-of-sequence token counts, as in both engines' output)
    seconds: float  # median wall time of the generate call over the rounds
    tok_s: float
    identical_to_plain: bool | None  # token ids equal our plain run's (None for plain itself)
    accepted_share: float | None  # accepted / drafted draft tokens; None where it cannot be counted
    target_passes: int | None  # target forward passes after the prompt (HF: its first pass also reads the prompt)
    mean_k: float | None  # mean draft length over drafting steps (ours only)
    runs_s: list[float]  # every round's seconds, for the record
    draft_variant: str | None = None  # the draft as run (our draft-model modes)
    first_difference: dict | None = None  # where the output first departs from plain's (exact modes: with the tie margin)
    agree_first_64: int | None = None  # plain_int4: how many of the first 64 tokens equal plain's, position by position
    target_kernel: str | None = DENSE  # the target as run (specdec/kernels/target_kernels.py); plain is plain decoding on it (None: another engine)
    runner: str | None = "eager"  # how our passes ran (specdec/core/runners); plain is plain decoding on it (None: not our engine)
    departs_dense_at: int | None = None  # plain modes: first new token where the output leaves dense plain's (None: same, or not judged)
    top1_agree_dense: float | None = None  # plain modes: top-1 agreement with dense plain's output under teacher forcing
    top1_agree_dense_untied: float | None = None  # the same where dense's own top-2 logits are not tied (specdec.measure.faithfulness)
    dense_tied: int | None = None  # positions of dense plain's output where its own top-2 logits are tied
    kl_dense: float | None = None  # plain modes: KL(dense || this) in nats along dense plain's output, mean over positions (ours only)
    kl_dense_top: float | None = None  # the same over dense's top-20 tokens and the rest: a lower bound (ours and llama.cpp)
    acceptance_by_position: list[float | None] | None = None  # accepted / tested at draft positions 1..K, all drafters (None: nothing drafted, or no steps known)
    tested_by_position: list[int] | None = None  # how many steps judged each position (specdec.measure.positions)


# --- running one mode -----------------------------------------------------------------------------


def run_ours(pair: ModelPair, prompt_ids: list[int], config: GenerationConfig) -> dict:
    config.validate()
    prepare(pair, config, progress=True)  # kernel, variant and cost table built or loaded once, before the clock starts
    start = time.perf_counter()
    events = list(OurSource(pair, config).iter_events(prompt_ids, config.max_new_tokens))  # prefill happens inside
    seconds = time.perf_counter() - start
    m = summarize(events)
    return {
        "ids": [t for e in events for t in e.emitted],
        "seconds": seconds,
        "accepted_share": m.accepted_share if m.drafted else None,
        "target_passes": m.target_passes,
        "mean_k": m.mean_k if m.drafted else None,
        "events": events,
    }


def run_mode(pair, prompt_ids, mode, k, max_new_tokens, schedule, variant=DENSE, k_policy=None, servers=None, kernel=DENSE,
             runner="eager") -> dict:
    if mode in (servers or {}):  # a real engine's server, up for the whole bench
        return servers[mode].run(prompt_ids, max_new_tokens)
    if split_mode(mode)[0] == "plain_int4":  # the lossy lane, as generate and the page run it: OurSource.lossy()
        lossy = OurSource(pair, replace(mode_config(mode, k, max_new_tokens, schedule), runner=runner)).lossy()
        return run_ours(lossy.pair, prompt_ids, lossy.config)
    if split_mode(mode)[0] in OUR_MODES:
        start = start_defaults(pair.name, pair.device) if split_mode(mode)[0] == "page" else None
        config = mode_config(mode, k, max_new_tokens, schedule, variant, k_policy, start)
        return run_ours(pair, prompt_ids, replace(config, target_kernel=kernel, runner=runner))
    return run_hf(pair, prompt_ids, mode, k, max_new_tokens, schedule)


# --- the whole benchmark --------------------------------------------------------------------------


def load_prompts(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        prompts = json.load(f)
    if not isinstance(prompts, list) or not prompts:
        raise ValueError(f"{path}: expected a non-empty JSON list of {{id, prompt, chat}} objects")
    for i, p in enumerate(prompts):
        if not isinstance(p, dict) or not isinstance(p.get("prompt"), str) or not p["prompt"].strip():
            raise ValueError(f"{path}: entry {i} needs a non-empty 'prompt'")
    return prompts


def expand_modes(modes, variants: list[str]) -> list[str]:
    """plain first (the reference for every other mode); each draft-model mode once per variant,
    named `spec@int4-v32k` when several variants are compared."""
    out = ["plain"]
    for mode in modes:
        base, own = split_mode(mode)
        if base not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)} (draft-model modes may name a variant: spec@int4)")
        if own is not None:
            out.append(f"{base}@{parse_variant(own).name}")  # an old name as today's
        elif base in DRAFT_MODES and len(variants) > 1:
            out += [f"{base}@{v}" for v in variants]
        elif base != "plain":
            out += [OWN_PLAIN[base], base] if base in OWN_PLAIN else [base]  # a real engine's plain comes with it
    return list(dict.fromkeys(out))


def bench(
    pair: ModelPair,
    prompts: list[dict],
    *,
    modes=DEFAULT_MODES,
    variants: list[str] | None = None,
    kernels: list[str] | None = None,
    runners: list[str] | None = None,
    k: int = 5,
    max_new_tokens: int = 96,
    repeats: int = 1,
    schedule: str = "constant",
    k_policy: str | None = None,
    warmup_tokens: int = 8,
    log=lambda line: print(line, file=sys.stderr, flush=True),
) -> dict:
    """Run every mode on every prompt, once per target kernel and runner (a lane); return {"results",
    "summary", "machine", "settings"}. `variants`: the draft variants of the draft-model modes
    (default: the measured default); `kernels`: the target kernels (default: dense); `runners`: how our
    passes run (default: eager; specdec/core/runners). Each lane is compared with plain decoding in the
    same lane, a real engine with its own plain decoding; transformers' modes and the real engines run
    once, beside the first lane. One built kernel model is resident at a time."""
    variants = [parse_variant(v).name for v in variants or [start_defaults(pair.name, pair.device).draft_variant]]  # old names as today's
    kernels = faithful.reference_first(list(dict.fromkeys(parse_kernel(name) for name in (kernels or [DENSE]))))
    runners = list(dict.fromkeys(parse_runner(name) for name in (runners or ["eager"])))
    lanes = [(kernel, runner) for kernel in kernels for runner in runners]
    modes = expand_modes(modes, variants)
    if pair.draft is None and any(split_mode(m)[0] in DRAFT_MODES or m.startswith("hf_assisted") for m in modes):
        raise ValueError(f"pair {pair.name!r} has no draft model")
    encoded = [pair.encode_prompt(p["prompt"], chat=p.get("chat", pair.chat), max_new_tokens=max_new_tokens) for p in prompts]
    variant_of = {m: split_mode(m)[1] or variants[0] for m in modes if split_mode(m)[0] in DRAFT_MODES}
    # Servers that run as blocks first, one at a time, before those that stay up beside our pair start
    # (memory: one engine server beside our pair at a time).
    blocks = run_blocks(pair, encoded, modes, k, max_new_tokens, repeats, warmup_tokens, log)
    results, summaries = [], {}
    with servers_beside(pair, modes, k) as servers:
        plan = Plan(pair, prompts, encoded, variant_of, servers, blocks, k, max_new_tokens, repeats, schedule, k_policy,
                    warmup_tokens, log, references={}, forced={}, ties={}, reference_logprobs={})
        for kernel in kernels:
            release(pair, keep=kernel)  # the previous kernel's model goes before this one is built
            modes_of = {runner: [m for m in modes if (kernel, runner) == lanes[0] or split_mode(m)[0] in OUR_MODES
                                 and m != "plain_int4"] for runner in runners}
            found, lane_summaries = bench_kernel(plan, modes_of, kernel)
            results += found
            summaries.update(lane_summaries)
    release(pair)
    return {
        "results": [asdict(r) for r in results],
        "summary": lanes_summary(summaries, results),
        "machine": machine_info(pair),
        "settings": {"pair": pair.name, "k": k, "max_new_tokens": max_new_tokens, "repeats": repeats,
                     "schedule": schedule, "k_policy": k_policy, "modes": list(modes), "draft_variants": variants,
                     "target_kernels": kernels, "runners": runners, "best": best_description(),
                     "page": start_defaults(pair.name, pair.device).line,
                     "timing": "wall time of the whole generate call (llama.cpp, vLLM: of the whole streamed request), "
                               "prompt prefill included, median over repeats; vLLM modes run as blocks, one server at a time"},
    }


@dataclass(frozen=True)
class Plan:
    """What the runs of every target kernel share."""

    pair: ModelPair
    prompts: list[dict]
    encoded: list[list[int]]  # each prompt's ids, templated
    variant_of: dict[str, str]  # draft-model mode -> its draft variant
    servers: dict  # mode -> a real engine's server up for the whole bench (bench_servers.Served)
    blocks: dict  # (prompt index, mode) -> the runs done as blocks (servers one at a time)
    k: int
    max_new_tokens: int
    repeats: int
    schedule: str
    k_policy: str | None
    warmup_tokens: int
    log: Callable[[str], None]
    references: dict  # prompt id -> the dense kernel's plain output, what every plain run is judged against (bench.faithful)
    forced: dict  # (prompt id, mode, kernel) -> (its top-1 predictions along the reference, KL, top-20 bound), measured once for all runners
    ties: dict  # prompt id -> per position of the reference: whether dense's own top-2 logits are tied there
    reference_logprobs: dict  # prompt id -> (R, V) dense's log-probabilities along its own output

    def run(self, mode: str, prompt_ids: list[int], tokens: int, kernel: str, runner: str) -> dict:
        return run_mode(self.pair, prompt_ids, mode, self.k, tokens, self.schedule, self.variant_of.get(mode, DENSE),
                        self.k_policy, self.servers, kernel, runner)


def bench_kernel(plan: Plan, modes_of: dict[str, list[str]], kernel: str) -> tuple[list[Result], dict]:
    """Every mode on every prompt with the target run by `kernel`, once per runner (modes_of: runner
    -> its modes): (results, {(kernel, runner): summary}). On each prompt the runners take turns,
    and within a runner its modes alternate, so load from other processes spreads over both. The
    runs of servers one at a time come done in `plan.blocks`."""
    def alternating(modes: list[str]) -> list[str]:
        return [m for m in modes if not runs_as_block(m)]

    # One short warm-up run of every mode: first calls pay for allocations, lazy setup, building (or
    # loading) draft variants, target kernels and the int4 target, and a compiled runner's captures.
    for runner, modes in modes_of.items():
        for mode in alternating(modes):
            plan.run(mode, plan.encoded[0], plan.warmup_tokens, kernel, runner)
    results = {runner: [] for runner in modes_of}
    events = {runner: {} for runner in modes_of}
    counter = [0, len(plan.prompts) * plan.repeats * sum(len(alternating(m)) for m in modes_of.values())]  # runs done, in all
    for i, (p, prompt_ids) in enumerate(zip(plan.prompts, plan.encoded)):
        pid = str(p.get("id", i))
        for runner, modes in modes_of.items():
            runs: dict[str, list[dict]] = {m: list(plan.blocks.get((i, m), [])) for m in modes}
            rounds(plan, runs, alternating(modes), prompt_ids, f"{kernel} {runner} {pid}", (kernel, runner), counter)
            found = [result_of(plan.pair, pid, mode, runs, plan.variant_of.get(mode), kernel, runner) for mode in modes]
            faithful.judge(plan, pid, prompt_ids, runs, found, kernel)
            results[runner] += found
            for mode in modes:
                if "events" in runs[mode][0]:
                    events[runner][pid, mode] = runs[mode][0]["events"]
    summaries = {(kernel, runner): kernel_summary(plan, results[runner], events[runner], modes, kernel)
                 for runner, modes in modes_of.items()}
    return [r for runner in modes_of for r in results[runner]], summaries


def rounds(plan: Plan, runs: dict, alternating: list[str], prompt_ids: list[int], what: str, lane: tuple[str, str],
           counter: list) -> None:
    """`plan.repeats` rounds of the alternating modes on one prompt, each run appended to `runs`."""
    for r in range(plan.repeats):
        # Rotate the order each round so no mode always runs right after another.
        for mode in alternating[r % len(alternating) :] + alternating[: r % len(alternating)]:
            out = plan.run(mode, prompt_ids, plan.max_new_tokens, *lane)
            runs[mode].append(out)
            counter[0] += 1
            plan.log(f"[{counter[0]}/{counter[1]}] {what} {mode}: {len(out['ids'])} tokens in {out['seconds']:.2f} s "
                     f"({len(out['ids']) / out['seconds']:.2f} tok/s)")


def result_of(pair: ModelPair, pid: str, mode: str, runs: dict, variant: str | None, kernel: str, runner: str) -> Result:
    """One mode's record on one prompt, from its runs: the median time, and whether (and where) its
    output departs from the plain decoding it is judged against."""
    reference = runs[OWN_PLAIN.get(mode, "plain")][0]
    seconds = [out["seconds"] for out in runs[mode]]
    first = runs[mode][0]
    median_s = statistics.median(seconds)
    result = Result(
        prompt=pid, mode=mode, tokens=len(first["ids"]), seconds=median_s, tok_s=len(first["ids"]) / median_s,
        identical_to_plain=None if mode == "plain" or mode in OWN_PLAIN.values() else all(out["ids"] == reference["ids"] for out in runs[mode]),
        accepted_share=first["accepted_share"], target_passes=first["target_passes"], mean_k=first["mean_k"],
        runs_s=seconds, draft_variant=variant,
        target_kernel=None if mode in SERVED else kernel if split_mode(mode)[0] in OUR_MODES else DENSE,  # transformers': as loaded
        runner=runner if split_mode(mode)[0] in OUR_MODES else None,
    )
    if first.get("events") and (positions := position_acceptance(first["events"])).steps:  # transformers' modes have no steps
        result.acceptance_by_position, result.tested_by_position = list(positions.rates), list(positions.tested)
    faithful.describe_difference(result, first, reference, runs["plain"][0], pair.dtype_name, pair.device.type)
    return result


def kernel_summary(plan: Plan, results: list[Result], events: dict, modes: list[str], kernel: str) -> dict:
    pair = plan.pair
    draft_gb = {m: resident_gb(draft_model(pair, v)) for m, v in plan.variant_of.items() if m in modes}
    draft_gb.update({m: resident_gb(pair.draft) for m in modes if m.startswith("hf_assisted")})
    summary = summarize_results(results, events, modes, draft_gb)
    summary["target_memory_gb"] = {"plain": resident_gb(kernel_target(pair, kernel))}
    summary["faithfulness"] = faithful.summary(results)
    summary["exactness"] = exactness(results, kernel, pair.dtype_name, pair.device.type)
    if "plain_int4" in modes:
        summary["target_memory_gb"]["plain_int4"] = resident_gb(target_model(pair, "int4"))
    return summary
