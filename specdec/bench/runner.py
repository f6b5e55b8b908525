"""Speed benchmark: our plain and speculative decoding against transformers' assisted generation.

Every mode runs the same models on the same prompt ids with greedy decoding, so every mode should
emit the same tokens as plain decoding (up to numerical ties); `identical_to_plain` checks it.
Timing: wall time of the whole generate call, prompt prefill included, for every mode alike.
Runs alternate round-robin (plain, spec, best, hf_assisted, hf_lookup, plain, ...) so that load
from other processes spreads over all modes; each figure is the median over `--repeats` rounds.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace

import torch

from specdec.bench.modes import DEFAULT_MODES, DRAFT_MODES, LLAMACPP, MODES, OURS, OWN_PLAIN, VLLM
from specdec.bench.report import geomean, summarize_results, table
from specdec.kernels.cpu_linear import CpuLinear
from specdec.measure.compare import departure, first_difference
from specdec.core.config import MAX_K, GenerationConfig
from specdec.measure.cost_table import costs_for
from specdec.engines.assemble import build_decoding
from specdec.measure.metrics import summarize
from specdec.models.dtypes import DTYPES
from specdec.models.machine import machine_info
from specdec.models.pair import ModelPair
from specdec.core.variant_names import parse_kernel
from specdec.kernels.target_kernels import kernel_target, release
from specdec.kernels.variants import default_variant, draft_model, parse_variant, resident_gb, target_model

DEFAULT_PROMPTS = os.path.join(os.path.dirname(__file__), "..", "..", "assets", "bench_prompts.json")
LOOKUP_NGRAM = 3  # longest n-gram prompt lookup matches, ours and transformers' alike


@dataclass
class Result:
    prompt: str  # prompt id
    mode: str
    tokens: int  # new tokens produced (an end-of-sequence token counts, as in both engines' output)
    seconds: float  # median wall time of the generate call over the rounds
    tok_s: float
    identical_to_plain: bool | None  # token ids equal our plain run's (None for plain itself)
    acceptance_rate: float | None  # accepted / drafted draft tokens; None where it cannot be counted
    target_passes: int | None  # target forward passes after the prompt (HF: its first pass also reads the prompt)
    mean_k: float | None  # mean draft length over drafting steps (ours only)
    runs_s: list[float]  # every round's seconds, for the record
    draft_variant: str | None = None  # the draft as run (our draft-model modes)
    first_difference: dict | None = None  # where the output first departs from plain's (exact modes: with the tie margin)
    agree_first_64: int | None = None  # plain_int4: how many of the first 64 tokens equal plain's, position by position
    target_kernel: str | None = "bf16"  # the target as run (specdec/kernels/target_kernels.py); plain is plain decoding on it (None: another engine)


# --- the policies ---------------------------------------------------------------------------------


def split_mode(mode: str) -> tuple[str, str | None]:
    """"spec@int4-v32k" -> ("spec", "int4-v32k"); "plain" -> ("plain", None)."""
    base, _, variant = mode.partition("@")
    return base, variant or None


def mode_config(mode: str, k: int, max_new_tokens: int, schedule: str, variant: str = "bf16",
                k_policy: str | None = None) -> GenerationConfig:
    """Our engine's settings for a mode. `schedule` applies to `spec` and, on the HF side, to
    `hf_assisted`: constant = fixed K; heuristic = +2 after a fully accepted draft, -1 otherwise.
    `k_policy`, when given, is `spec`'s K policy instead (specdec/core/k_policy.py: fixed, adaptive, cost).
    `variant` is the draft variant of the draft-model modes; a mode may name its own (`spec@int4`)."""
    mode, own = split_mode(mode)
    base = GenerationConfig(max_new_tokens=max_new_tokens, k=k, temperature=0.0, lookup_ngram=LOOKUP_NGRAM,
                            draft_variant=own or variant)
    if mode in ("plain", "plain_int4"):
        return replace(base, drafter="none", draft_variant="bf16")
    if mode == "spec":
        policy = k_policy or ("adaptive" if schedule == "heuristic" else "fixed")
        return replace(base, drafter="model", k_policy=policy, k_max=MAX_K)
    if mode == "lookup":
        return replace(base, drafter="lookup", draft_variant="bf16")
    if mode == "best":
        return best_config(base)
    raise ValueError(f"{mode!r} is not one of our modes")


def best_config(base: GenerationConfig) -> GenerationConfig:
    """Our best policy on the mixed prompt set (docs/benchmarks.md, "How best was chosen"): prompt
    lookup on matches of 2 tokens or more (free, long accepted runs on edits), the draft model
    otherwise; K chosen each step from this machine's pass costs and the acceptance so far, within
    0..8 (0: a plain step where drafting would not pay; specdec/core/k_policy.py); the draft stops
    early when unsure (a rejected draft token costs a draft pass for nothing)."""
    return replace(base, drafter="auto", k_policy="cost", k_max=8, draft_confidence=0.4)


# --- running one mode -----------------------------------------------------------------------------


def run_ours(pair: ModelPair, prompt_ids: list[int], config: GenerationConfig) -> dict:
    config.validate()
    kernel_target(pair, config.target_kernel)  # built or loaded once, before the clock starts
    if config.drafter in ("model", "auto"):
        draft_model(pair, config.draft_variant)  # built or loaded once, before the clock starts
    if config.policy == "cost" and config.drafter != "none":
        costs_for(pair, config, progress=True)  # cached, or measured once, before the clock starts
    start = time.perf_counter()
    events = list(build_decoding(pair, prompt_ids, config))  # prefill happens inside
    seconds = time.perf_counter() - start
    m = summarize(events)
    return {
        "ids": [t for e in events for t in e.emitted],
        "seconds": seconds,
        "acceptance_rate": m.acceptance_rate if m.drafted else None,
        "target_passes": m.target_passes,
        "mean_k": m.mean_k if m.drafted else None,
        "events": events,
    }


class PassCounter:
    """Counts forward calls of a model (a forward pre-hook: no effect on the computation)."""

    def __init__(self, model):
        self.calls = 0
        self._handle = model.register_forward_pre_hook(self._count)

    def _count(self, *_):
        self.calls += 1

    def remove(self):
        self._handle.remove()


@contextlib.contextmanager
def assistant_settings(draft, **values):
    """transformers reads the assistant's schedule from the assistant model's own generation_config,
    not from generate()'s arguments; set it for one call and put the old values back."""
    gc = draft.generation_config
    old = {name: getattr(gc, name, None) for name in values}
    for name, value in values.items():
        setattr(gc, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(gc, name, value)


@contextlib.contextmanager
def quiet_transformers():
    """transformers warns on every assisted call about how it calls itself; keep stderr readable."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def run_hf(pair: ModelPair, prompt_ids: list[int], mode: str, k: int, max_new_tokens: int, schedule: str) -> dict:
    """transformers' generate, greedy, with the engine's end-of-sequence ids and length limits."""
    ids = torch.tensor([prompt_ids], device=pair.device)
    eos = sorted(pair.eos_ids)
    common = dict(
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        eos_token_id=eos or None,
        pad_token_id=eos[0] if eos else 0,
        repetition_penalty=1.0,  # a model's generation_config may set sampling extras; greedy means none
        temperature=None,
        top_p=None,
        top_k=None,
    )
    kernels = CpuLinear() if mode.endswith("_cpulinear") and pair.device.type == "cpu" else contextlib.nullcontext()
    base = mode.removesuffix("_cpulinear")
    if base == "hf_assisted":
        # Same K and schedule as our `spec`; transformers' confidence early stop (default 0.4) is
        # switched off because `spec` has none (`best` is where ours uses one).
        settings = assistant_settings(
            pair.draft,
            num_assistant_tokens=k,
            num_assistant_tokens_schedule="constant" if schedule == "constant" else "heuristic_transient",
            assistant_confidence_threshold=0.0,
        )
        extra = dict(assistant_model=pair.draft)
    elif base == "hf_lookup":
        settings = contextlib.nullcontext()
        extra = dict(prompt_lookup_num_tokens=k, max_matching_ngram_size=LOOKUP_NGRAM)
    else:
        raise ValueError(f"{mode!r} is not a transformers mode")
    target_calls = PassCounter(pair.target)
    draft_calls = PassCounter(pair.draft) if base == "hf_assisted" else None
    try:
        with kernels, settings, quiet_transformers():
            start = time.perf_counter()
            out = pair.target.generate(ids, **extra, **common)
            seconds = time.perf_counter() - start
    finally:
        target_calls.remove()
        if draft_calls:
            draft_calls.remove()
    new = out[0, len(prompt_ids) :].tolist()
    # Each target pass emits its matched candidates + 1 token, so tokens - passes were accepted
    # drafts; each assistant forward drafts one token. Prompt lookup's drafts are not countable.
    acceptance = (len(new) - target_calls.calls) / draft_calls.calls if draft_calls and draft_calls.calls else None
    return {"ids": new, "seconds": seconds, "acceptance_rate": acceptance, "target_passes": target_calls.calls, "mean_k": None}


def run_remote(source, prompt_ids: list[int], max_new_tokens: int) -> dict:
    """One streamed request to a real engine's server (specdec.engines), timed like ours: the wall time
    of the whole request, from sending it (prompt ids, prefill on the server) to its last chunk."""
    start = time.perf_counter()
    events = list(source.iter_events(prompt_ids, max_new_tokens))
    seconds = time.perf_counter() - start
    m = summarize(events)
    return {"ids": [t for e in events for t in e.emitted], "seconds": seconds,
            "acceptance_rate": m.acceptance_rate if m.drafted else None,
            "target_passes": m.target_passes,  # one per step: the server's verify passes, its prompt pass's token included
            "mean_k": m.mean_k if m.drafted else None, "events": events}


def run_llamacpp(pair: ModelPair, servers: dict, prompt_ids: list[int], mode: str, max_new_tokens: int) -> dict:
    from specdec.engines.llamacpp import LlamaCppSource

    source = LlamaCppSource(servers[mode].url, pair.tokenizer, speculative=mode == "llamacpp_spec", eos_ids=pair.eos_ids)
    return run_remote(source, prompt_ids, max_new_tokens)


@contextlib.contextmanager
def llamacpp_servers(modes, k: int):
    """mode -> running llama-server for the llama.cpp modes among `modes`, both up for the whole bench
    (about 1 GB resident each: they fit beside our pair), stopped at the end."""
    from specdec.engines.llamacpp import PLAIN, SPECULATIVE, start_server

    servers = {}
    try:
        for mode in modes:
            if mode in LLAMACPP:
                servers[mode] = start_server(SPECULATIVE if mode == "llamacpp_spec" else PLAIN, k=k)
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def run_vllm(pair: ModelPair, url: str, model: str, prompt_ids: list[int], mode: str, max_new_tokens: int) -> dict:
    from specdec.engines.vllm import VllmSource

    return run_remote(VllmSource(url, pair.tokenizer, speculative=mode == "vllm_spec", model=model), prompt_ids, max_new_tokens)


def vllm_blocks(pair: ModelPair, encoded: list[list[int]], modes, k: int, max_new_tokens: int, repeats: int,
                warmup_tokens: int, log) -> dict:
    """(prompt index, mode) -> the runs of each vLLM mode among `modes`: one server at a time, started,
    warmed up with one short run, used for every prompt and round, stopped."""
    from specdec.engines.vllm import PLAIN, SPECULATIVE, check_server, start_server

    out = {}
    for mode in (m for m in modes if m in VLLM):
        log(f"starting vLLM for {mode} (minutes)")
        server = start_server(SPECULATIVE if mode == "vllm_spec" else PLAIN, k=k)
        try:
            model = check_server(server.url)
            run_vllm(pair, server.url, model, encoded[0], mode, warmup_tokens)
            for i, prompt_ids in enumerate(encoded):
                out[i, mode] = [run_vllm(pair, server.url, model, prompt_ids, mode, max_new_tokens) for _ in range(repeats)]
        finally:
            server.stop()
    return out


def run_mode(pair, prompt_ids, mode, k, max_new_tokens, schedule, variant="bf16", k_policy=None, servers=None, kernel="bf16") -> dict:
    if mode in LLAMACPP:
        return run_llamacpp(pair, servers, prompt_ids, mode, max_new_tokens)
    if split_mode(mode)[0] == "plain_int4":  # the lossy lane: the same engine on an int4 copy of the target
        return run_ours(replace(pair, target=target_model(pair, "int4")), prompt_ids, mode_config(mode, k, max_new_tokens, schedule))
    if split_mode(mode)[0] in OURS:
        return run_ours(pair, prompt_ids, replace(mode_config(mode, k, max_new_tokens, schedule, variant, k_policy), target_kernel=kernel))
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
            parse_variant(own)
            out.append(mode)
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
    k: int = 5,
    max_new_tokens: int = 96,
    repeats: int = 1,
    schedule: str = "constant",
    k_policy: str | None = None,
    warmup_tokens: int = 8,
    log=lambda line: print(line, file=sys.stderr, flush=True),
) -> dict:
    """Run every mode on every prompt, once per target kernel; return {"results", "summary",
    "machine", "settings"}. `variants`: the draft variants of the draft-model modes (default: the
    measured default); `kernels`: the target kernels (default: bf16). Each kernel is compared with
    plain decoding on the same kernel, a real engine with its own plain decoding; transformers' modes
    and the real engines run once, beside the bf16 kernel. One built kernel model is resident at a time."""
    variants = variants or [default_variant(pair.name, pair.device)]
    for v in variants:
        parse_variant(v)
    kernels = list(dict.fromkeys(parse_kernel(name) for name in (kernels or ["bf16"])))
    modes = expand_modes(modes, variants)
    if pair.draft is None and any(split_mode(m)[0] in DRAFT_MODES or m.startswith("hf_assisted") for m in modes):
        raise ValueError(f"pair {pair.name!r} has no draft model")
    encoded = [pair.encode_prompt(p["prompt"], chat=p.get("chat", pair.chat), max_new_tokens=max_new_tokens) for p in prompts]
    variant_of = {m: split_mode(m)[1] or variants[0] for m in modes if split_mode(m)[0] in DRAFT_MODES}
    # vLLM first, each mode a block with its own server, before llama.cpp's servers start (memory: one
    # engine server beside our pair at a time).
    blocks = vllm_blocks(pair, encoded, modes, k, max_new_tokens, repeats, warmup_tokens, log)
    results, summaries = [], {}
    with llamacpp_servers(modes, k) as servers:
        for kernel in kernels:
            release(pair, keep=kernel)  # the previous kernel's model goes before this one is built
            own = [m for m in modes if kernel == kernels[0] or split_mode(m)[0] in OURS and m != "plain_int4"]
            found, summaries[kernel] = _bench_kernel(pair, prompts, encoded, own, variant_of, servers, blocks, kernel, k,
                                                     max_new_tokens, repeats, schedule, k_policy, warmup_tokens, log)
            results += found
    release(pair)
    summary = dict(summaries[kernels[0]])
    if len(kernels) > 1:
        summary["by_kernel"] = summaries
    summary["fastest_exact"] = fastest_exact(results)
    return {
        "results": [asdict(r) for r in results],
        "summary": summary,
        "machine": machine_info(pair),
        "settings": {"pair": pair.name, "k": k, "max_new_tokens": max_new_tokens, "repeats": repeats,
                     "schedule": schedule, "k_policy": k_policy, "modes": list(modes), "draft_variants": variants,
                     "target_kernels": kernels, "best": _best_description(),
                     "timing": "wall time of the whole generate call (llama.cpp, vLLM: of the whole streamed request), "
                               "prompt prefill included, median over repeats; vLLM modes run as blocks, one server at a time"},
    }


def fastest_exact(results: list[Result]) -> dict | None:
    """The fastest exact configuration (our modes but the lossy lane, on any kernel; geomean tok/s
    over the prompts) and its tokens/s over the fastest plain configuration of any kernel."""
    rates: dict[tuple[str, str], list[float]] = {}
    for r in results:
        if split_mode(r.mode)[0] in OURS and r.mode != "plain_int4":
            rates.setdefault((r.mode, r.target_kernel), []).append(r.tok_s)
    if not rates:
        return None
    rate = {key: geomean(values) for key, values in rates.items()}
    (mode, kernel), best = max(rate.items(), key=lambda item: item[1])
    plain = max((v for (m, _), v in rate.items() if m == "plain"), default=None)
    return {"mode": mode, "target_kernel": kernel, "tok_s": best, "over_fastest_plain": best / plain if plain else None}


def _bench_kernel(pair, prompts, encoded, modes, variant_of, servers, blocks, kernel, k, max_new_tokens, repeats, schedule,
                  k_policy, warmup_tokens, log):
    """Every mode on every prompt with the target run by `kernel`: (results, summary). vLLM's runs
    come done in `blocks`; the other modes alternate."""

    def run(mode, prompt_ids, tokens):
        return run_mode(pair, prompt_ids, mode, k, tokens, schedule, variant_of.get(mode, "bf16"), k_policy, servers, kernel)

    alternating = [m for m in modes if m not in VLLM]
    # One short warm-up run of every mode: first calls pay for allocations, lazy setup and for
    # building (or loading) draft variants, target kernels and the int4 target, which the timed runs then reuse.
    for mode in alternating:
        run(mode, encoded[0], warmup_tokens)

    results, events = [], {}
    total = len(prompts) * repeats * len(alternating)
    done = 0
    for i, (p, prompt_ids) in enumerate(zip(prompts, encoded)):
        pid = str(p.get("id", len(results)))
        runs: dict[str, list[dict]] = {m: list(blocks.get((i, m), [])) for m in modes}
        for r in range(repeats):
            # Rotate the order each round so no mode always runs right after another.
            for mode in alternating[r % len(alternating) :] + alternating[: r % len(alternating)]:
                out = run(mode, prompt_ids, max_new_tokens)
                runs[mode].append(out)
                done += 1
                log(f"[{done}/{total}] {kernel} {pid} {mode}: {len(out['ids'])} tokens in {out['seconds']:.2f} s ({len(out['ids']) / out['seconds']:.2f} tok/s)")
        for mode in modes:
            reference = runs[OWN_PLAIN.get(mode, "plain")][0]
            seconds = [out["seconds"] for out in runs[mode]]
            first = runs[mode][0]
            median_s = statistics.median(seconds)
            result = Result(
                prompt=pid,
                mode=mode,
                tokens=len(first["ids"]),
                seconds=median_s,
                tok_s=len(first["ids"]) / median_s,
                identical_to_plain=None if mode == "plain" or mode in OWN_PLAIN.values() else all(out["ids"] == reference["ids"] for out in runs[mode]),
                acceptance_rate=first["acceptance_rate"],
                target_passes=first["target_passes"],
                mean_k=first["mean_k"],
                runs_s=seconds,
                draft_variant=variant_of.get(mode),
                target_kernel=None if mode in LLAMACPP + VLLM else kernel if split_mode(mode)[0] in OURS else "bf16",  # transformers': as loaded
            )
            if "events" in first:
                events[pid, mode] = first["events"]
            if mode == "plain_int4":
                d = departure(first["events"], runs["plain"][0]["events"], pair.dtype_name)
                result.first_difference = None if d.difference is None else {
                    "index": d.difference.index, "lossy_token": d.difference.spec_token, "exact_token": d.difference.plain_token,
                    "lossy_text": d.difference.spec_text, "exact_text": d.difference.plain_text}
                result.agree_first_64 = d.agree
            elif result.identical_to_plain is False and "events" in first:  # exact modes: say whether it is a tie
                d = first_difference(first["events"], reference["events"], pair.dtype_name)
                result.first_difference = {"index": d.index, "token": d.spec_token, "plain_token": d.plain_token,
                                           "text": d.spec_text, "plain_text": d.plain_text, "margin": d.margin, "is_tie": d.is_tie}
            results.append(result)

    draft_gb = {m: resident_gb(draft_model(pair, v)) for m, v in variant_of.items() if m in modes}
    draft_gb.update({m: resident_gb(pair.draft) for m in modes if m.startswith("hf_assisted")})
    summary = summarize_results(results, events, modes, draft_gb)
    summary["target_memory_gb"] = {"plain": resident_gb(kernel_target(pair, kernel))}
    if "plain_int4" in modes:
        summary["target_memory_gb"]["plain_int4"] = resident_gb(target_model(pair, "int4"))
    return results, summary


def _best_description() -> str:
    b = best_config(GenerationConfig())
    return f"drafter={b.drafter}, k_policy={b.k_policy}, k_max={b.k_max}, draft_confidence={b.draft_confidence}"


def set_draft_dtype(pair: ModelPair, name: str | None) -> None:
    """Cast the draft in place (our stored weights are bf16, so bf16 <-> fp32 loses nothing)."""
    if name and pair.draft is not None:
        pair.draft.to(DTYPES[name])


def run_bench(args) -> int:
    from specdec.cli.args import kernel_names, load, variant_names

    if getattr(args, "exact", False):
        args.dtype = "fp32"
    if not 1 <= args.k <= MAX_K:
        raise ValueError(f"k must be an integer in 1..{MAX_K}, got {args.k}")
    if args.repeats < 1 or args.max_new_tokens < 1:
        raise ValueError("repeats and max_new_tokens must be >= 1")
    prompts = load_prompts(args.prompts)
    pair = load(args)
    set_draft_dtype(pair, getattr(args, "draft_dtype", None))
    modes = [m.strip() for m in getattr(args, "modes", ",".join(DEFAULT_MODES)).split(",") if m.strip()]
    kernels = kernel_names(args)  # bad names fail before the models load
    report = bench(pair, prompts, modes=modes, variants=variant_names(args, pair), kernels=kernels, k=args.k,
                   max_new_tokens=args.max_new_tokens, repeats=args.repeats, schedule=getattr(args, "schedule", "constant"),
                   k_policy=getattr(args, "k_policy", None))
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(table(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m specdec.bench.runner ...` is `python -m specdec bench ...`: the same options (cli_args)."""
    import argparse

    from specdec.models.bundle_chunks import BundleError
    from specdec.cli.args import add_bench_command_args

    parser = argparse.ArgumentParser(prog="python -m specdec.bench.runner", description=__doc__.splitlines()[0])
    add_bench_command_args(parser)
    args = parser.parse_args(argv)
    try:
        return run_bench(args)
    except (ValueError, BundleError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
