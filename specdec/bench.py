"""Speed benchmark: our plain and speculative decoding against transformers' assisted generation.

Every mode runs the same models on the same prompt ids with greedy decoding, so every mode should
emit the same tokens as plain decoding (up to numerical ties); `identical_to_plain` checks it.
Timing: wall time of the whole generate call, prompt prefill included, for every mode alike.
Runs alternate round-robin (plain, spec, best, hf_assisted, hf_lookup, plain, ...) so that load
from other processes spreads over all modes; each figure is the median over `--repeats` rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace

import torch

from .cached_model import CpuLinear
from .config import MAX_K, GenerationConfig
from .engine import Decoding
from .metrics import expected_tokens_per_pass, summarize
from .models import DTYPES, ModelPair

OURS = ("plain", "spec", "lookup", "best")  # our engine
HF = ("hf_assisted", "hf_lookup", "hf_assisted_cpulinear", "hf_lookup_cpulinear")  # transformers' generate, same models
# *_cpulinear: transformers' loop with our CPU matmul choices (cached_model.CpuLinear), which
# separates what the loop costs from what the kernels cost.
MODES = OURS + HF
DEFAULT_MODES = ("plain", "spec", "best", "hf_assisted", "hf_lookup")
DEFAULT_PROMPTS = os.path.join(os.path.dirname(__file__), "..", "assets", "bench_prompts.json")
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


# --- the policies ---------------------------------------------------------------------------------


def mode_config(mode: str, k: int, max_new_tokens: int, schedule: str) -> GenerationConfig:
    """Our engine's settings for a mode. `schedule` applies to `spec` and, on the HF side, to
    `hf_assisted`: constant = fixed K; heuristic = +2 after a fully accepted draft, -1 otherwise."""
    base = GenerationConfig(max_new_tokens=max_new_tokens, k=k, temperature=0.0, lookup_ngram=LOOKUP_NGRAM)
    if mode == "plain":
        return replace(base, drafter="none")
    if mode == "spec":
        return replace(base, drafter="model", adaptive_k=schedule == "heuristic", k_max=MAX_K)
    if mode == "lookup":
        return replace(base, drafter="lookup")
    if mode == "best":
        return best_config(base)
    raise ValueError(f"{mode!r} is not one of our modes")


def best_config(base: GenerationConfig) -> GenerationConfig:
    """Our best policy on the mixed prompt set (docs/benchmarks.md, "How best was chosen"): prompt
    lookup on matches of 2 tokens or more (free, long accepted runs on edits), the draft model
    otherwise; K adapts within 1..8; the draft stops early when unsure (a rejected draft token
    costs a draft pass for nothing)."""
    return replace(base, drafter="auto", adaptive_k=True, k_max=8, draft_confidence=0.4)


# --- running one mode -----------------------------------------------------------------------------


def run_ours(pair: ModelPair, prompt_ids: list[int], config: GenerationConfig) -> dict:
    start = time.perf_counter()
    events = list(Decoding(pair, prompt_ids, config.validate()))  # prefill happens inside
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


def run_mode(pair, prompt_ids, mode, k, max_new_tokens, schedule) -> dict:
    if mode in OURS:
        return run_ours(pair, prompt_ids, mode_config(mode, k, max_new_tokens, schedule))
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


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def machine_info(pair: ModelPair) -> dict:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    ram_gb = None
    with contextlib.suppress(OSError, StopIteration, ValueError):
        with open("/proc/meminfo") as f:
            ram_gb = round(int(next(line for line in f if line.startswith("MemTotal")).split()[1]) / 2**20, 1)
    if pair.device.type == "cuda":
        cpu += f" + {torch.cuda.get_device_name(pair.device)}"
    import transformers

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "ram_gb": ram_gb,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": str(pair.device),
        "dtype": dtype_name(pair.target.dtype),
        "draft_dtype": dtype_name(pair.draft.dtype) if pair.draft is not None else None,
    }


def dtype_name(dt: torch.dtype) -> str:
    return next(k for k, v in DTYPES.items() if v == dt)


def bench(
    pair: ModelPair,
    prompts: list[dict],
    *,
    modes=DEFAULT_MODES,
    k: int = 5,
    max_new_tokens: int = 96,
    repeats: int = 1,
    schedule: str = "constant",
    warmup_tokens: int = 8,
    log=lambda line: print(line, file=sys.stderr, flush=True),
) -> dict:
    """Run every mode on every prompt; return {"results", "summary", "machine", "settings"}."""
    modes = ["plain"] + [m for m in modes if m != "plain"]  # plain is the reference for every other mode
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    if pair.draft is None and any(m in ("spec", "best") or m.startswith("hf_assisted") for m in modes):
        raise ValueError(f"pair {pair.name!r} has no draft model")
    encoded = [pair.encode_prompt(p["prompt"], chat=p.get("chat", pair.chat), max_new_tokens=max_new_tokens) for p in prompts]

    # One short warm-up run of every mode: first calls pay for allocations and lazy setup.
    for mode in modes:
        run_mode(pair, encoded[0], mode, k, warmup_tokens, schedule)

    results, spec_events = [], {}
    total = len(prompts) * repeats * len(modes)
    done = 0
    for p, prompt_ids in zip(prompts, encoded):
        pid = str(p.get("id", len(results)))
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for r in range(repeats):
            # Rotate the order each round so no mode always runs right after another.
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
                run = run_mode(pair, prompt_ids, mode, k, max_new_tokens, schedule)
                runs[mode].append(run)
                done += 1
                log(f"[{done}/{total}] {pid} {mode}: {len(run['ids'])} tokens in {run['seconds']:.2f} s ({len(run['ids']) / run['seconds']:.2f} tok/s)")
        plain_ids = runs["plain"][0]["ids"]
        for mode in modes:
            seconds = [run["seconds"] for run in runs[mode]]
            first = runs[mode][0]
            median_s = statistics.median(seconds)
            results.append(Result(
                prompt=pid,
                mode=mode,
                tokens=len(first["ids"]),
                seconds=median_s,
                tok_s=len(first["ids"]) / median_s,
                identical_to_plain=None if mode == "plain" else all(run["ids"] == plain_ids for run in runs[mode]),
                acceptance_rate=first["acceptance_rate"],
                target_passes=first["target_passes"],
                mean_k=first["mean_k"],
                runs_s=seconds,
            ))
        if "spec" in runs:
            spec_events[pid] = (runs["spec"][0]["events"], runs["plain"][0]["events"])

    return {
        "results": [asdict(r) for r in results],
        "summary": summarize_results(results, spec_events, modes, k),
        "machine": machine_info(pair),
        "settings": {"pair": pair.name, "k": k, "max_new_tokens": max_new_tokens, "repeats": repeats,
                     "schedule": schedule, "modes": list(modes), "best": _best_description(),
                     "timing": "wall time of the whole generate call, prompt prefill included, median over repeats"},
    }


def _best_description() -> str:
    b = best_config(GenerationConfig())
    return f"drafter={b.drafter}, adaptive_k={b.adaptive_k}, k_max={b.k_max}, draft_confidence={b.draft_confidence}"


def summarize_results(results: list[Result], spec_events: dict, modes, k: int) -> dict:
    by = {(r.prompt, r.mode): r for r in results}
    prompts = list(dict.fromkeys(r.prompt for r in results))

    def ratio(mode: str, over: str) -> float | None:
        if mode not in modes or over not in modes:
            return None
        return geomean([by[p, mode].tok_s / by[p, over].tok_s for p in prompts])

    summary = {
        "speedup_vs_plain": {m: ratio(m, "plain") for m in modes if m != "plain"},
        "ratio_vs_hf_assisted": ratio("spec", "hf_assisted"),
        "ratio_best_vs_hf_assisted": ratio("best", "hf_assisted"),
        "ratio_vs_hf_assisted_cpulinear": ratio("spec", "hf_assisted_cpulinear"),  # same kernels: the loops alone
        "ratio_lookup_vs_hf_lookup": ratio("lookup", "hf_lookup"),
        "all_identical_to_plain": {m: all(by[p, m].identical_to_plain for p in prompts) for m in modes if m != "plain"},
    }
    summary["leviathan"] = leviathan(spec_events, by) if spec_events else None
    return summary


def leviathan(spec_events: dict, by: dict) -> dict:
    """Measured speedup of `spec` over `plain` against Leviathan et al.'s prediction, per prompt.

    Both sides leave the prompt out: the formula models decoding, so `measured` here is the ratio
    of tokens/s after prefill (the events' elapsed time), not the whole-call ratio of the table.
    Three predictions, from the textbook to the measured:
    - textbook: (1 - a^(K+1)) / ((1 - a)(K c + 1)), c = draft pass / decode step. It assumes a
      K+1-token verify pass costs one decode step (true on a GPU, not on a CPU) and that each
      draft token is accepted independently with probability a = accepted / drafted;
    - with_costs: the same expected tokens per pass, times t_decode / (K t_draft + t_verify);
    - from_passes: the measured tokens per target pass instead of the expected ones (acceptance
      comes in runs, so real passes carry more tokens than the independent model says); what is
      left to explain is whether the passes account for all the time."""
    rows = {}
    for pid, (spec, plain) in spec_events.items():
        m, p = summarize(spec), summarize(plain)
        if not m.drafted:
            continue
        a, kk = m.acceptance_rate, m.mean_k
        c = m.draft_pass_s / p.target_pass_s  # draft pass over one decode step of the target
        cost = p.target_pass_s / (kk * m.draft_pass_s + m.target_pass_s)  # decode steps' time per speculative step
        predicted = {
            "textbook": expected_tokens_per_pass(a, kk) / (kk * c + 1),
            "with_costs": expected_tokens_per_pass(a, kk) * cost,
            "from_passes": m.tokens_per_step * cost,
        }
        measured = m.tokens_per_s / p.tokens_per_s  # prefill excluded on both sides
        rows[pid] = {
            "acceptance_rate": a, "mean_k": kk, "c": c, "tokens_per_pass": m.tokens_per_step,
            "expected_tokens_per_pass": expected_tokens_per_pass(a, kk),
            "verify_over_decode": m.target_pass_s / p.target_pass_s,  # cost of a K+1-token pass in decode steps
            "draft_pass_ms": 1000 * m.draft_pass_s, "decode_pass_ms": 1000 * p.target_pass_s, "verify_pass_ms": 1000 * m.target_pass_s,
            "measured": measured,
            **{f"predicted_{k}": v for k, v in predicted.items()},
            **{f"measured_over_{k}": measured / v for k, v in predicted.items()},
        }
    out = {"per_prompt": rows, "c": statistics.median(r["c"] for r in rows.values()) if rows else None}
    for k in ("textbook", "with_costs", "from_passes"):
        out[f"measured_over_{k}"] = geomean([r[f"measured_over_{k}"] for r in rows.values()])
    return out


# --- output ---------------------------------------------------------------------------------------


def table(report: dict) -> str:
    rows = report["results"]
    plain = {r["prompt"]: r["tok_s"] for r in rows if r["mode"] == "plain"}
    head = f"{'prompt':<20} {'mode':<22} {'tokens':>6} {'seconds':>8} {'tok/s':>7} {'x plain':>7} {'same':>5} {'accept':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        same = "" if r["identical_to_plain"] is None else ("yes" if r["identical_to_plain"] else "NO")
        acc = "" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.0%}"
        lines.append(f"{r['prompt'][:20]:<20} {r['mode']:<22} {r['tokens']:>6} {r['seconds']:>8.2f} {r['tok_s']:>7.2f} "
                     f"{r['tok_s'] / plain[r['prompt']]:>6.2f}x {same:>5} {acc:>6}")
    s = report["summary"]
    lines.append("")
    lines.append("geomean speedup vs plain: " + ", ".join(f"{m} {v:.2f}x" for m, v in s["speedup_vs_plain"].items() if v))
    for key in ("ratio_vs_hf_assisted", "ratio_best_vs_hf_assisted", "ratio_vs_hf_assisted_cpulinear", "ratio_lookup_vs_hf_lookup"):
        if s[key]:
            lines.append(f"{key}: {s[key]:.2f}x")
    lev = s.get("leviathan")
    if lev and lev["c"] is not None:
        lines.append(f"c (draft pass / decode step) {lev['c']:.3f}; spec measured/predicted (prefill excluded): textbook "
                     f"{lev['measured_over_textbook']:.2f}, with measured pass costs {lev['measured_over_with_costs']:.2f}, "
                     f"with measured costs and tokens per pass {lev['measured_over_from_passes']:.2f}")
    m = report["machine"]
    lines.append(f"machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}, transformers {m['transformers']}, "
                 f"{m['device']}, target {m['dtype']}, draft {m['draft_dtype']}")
    return "\n".join(lines)


def add_bench_args(p: argparse.ArgumentParser) -> None:
    """Options beyond the common model ones (the `bench` subcommand and `python -m specdec.bench`)."""
    p.add_argument("--draft-dtype", choices=list(DTYPES), help="the draft model's dtype (default: --dtype)")
    p.add_argument("--exact", action="store_true", help="target in fp32 for every mode (verification without bf16 rounding); draft keeps --draft-dtype")
    p.add_argument("--schedule", choices=["constant", "heuristic"], default="constant", help="K schedule of spec and hf_assisted")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES), help=f"comma-separated, from {', '.join(MODES)}")


def set_draft_dtype(pair: ModelPair, name: str | None) -> None:
    """Cast the draft in place (our stored weights are bf16, so bf16 <-> fp32 loses nothing)."""
    if name and pair.draft is not None:
        pair.draft.to(DTYPES[name])


def run_bench(args) -> int:
    from .__main__ import load

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
    report = bench(pair, prompts, modes=modes, k=args.k, max_new_tokens=args.max_new_tokens,
                   repeats=args.repeats, schedule=getattr(args, "schedule", "constant"))
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(table(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m specdec.bench ...` is `python -m specdec bench ...`: one parser serves both."""
    from .__main__ import main as cli_main

    return cli_main(["bench", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
