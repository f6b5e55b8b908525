"""The GPU check: the runners (eager, static, compiled) on the real shapes of two pairs, with
random weights and no download, in one call. NOT RUN ON A GPU YET: written and dry-run on a CPU
(`--device cpu --layers 2`), where the compiled runner is torch.compile instead of CUDA graphs.

    scripts/gpu_check.sh [--skip-tests] [--out record.json] [options below]

What it measures and writes (one JSON record: --out, else $OUT/gpu_check.json when $OUT is set;
and a printed table):
- per model (the 1.5B and 7B targets, the 0.5B draft) and runner: the one-token pass, the target's
  check of K + 1 tokens for K = 1, 3, 5, 7, the capture time of each shape (compiled runner), and
  why a shape did not capture, if one did not;
- per pair and runner: c (a draft pass over a decode step), the verify cost of each K (a K+1 pass
  over a decode step), and the speedup Leviathan et al.'s formula predicts with them at the
  per-token acceptance the 1.5B/0.5B pair measured on a CPU (ALPHA_CPU; the 7B pair was never
  measured, so the same figure stands in for it);
- per pair, a whole greedy run on the compiled runner against plain decoding on it. Random weights
  accept almost nothing, so this measures the loop's own cost: the measured seconds per step
  against the K draft passes and one check the pass timings account for. Then the same with
  acceptance forced to 1 (every attention and MLP output projection zeroed: each layer adds
  nothing, both models predict "repeat the last token"; dense kernels cost the same with zeros):
  an upper bound for a real pair;
- greedy parity of the static and compiled runners with eager decoding, fp32, on tiny-random;
- host syncs per steady-state step of each runner (torch.cuda.set_sync_debug_mode, GPU only);
- the draft's K one-token passes as one CUDA graph against K replays of the one-pass graph (GPU only);
- peak GPU memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.core.config import GenerationConfig  # noqa: E402
from specdec.core.runners.kv import fixed_pass  # noqa: E402
from specdec.core.theory import predicted_speedup  # noqa: E402
from specdec.engines.assemble import build_decoding  # noqa: E402
from specdec.measure.passcost import prefilled, time_passes  # noqa: E402
from specdec.models.dtypes import DTYPES  # noqa: E402
from specdec.models.pair import ModelPair, load_pair  # noqa: E402

# The median per-token acceptance (alpha) of the 0.5B bf16 draft with the 1.5B target over the six
# bench prompts on a CPU (docs/benchmarks.md, "The app's three predictions": 0.76 to 1.00).
ALPHA_CPU = 0.90
CHECK_K = (1, 3, 5, 7)
RUNNERS = ("eager", "static", "compiled")
# From the public config.json files of Qwen/Qwen2.5-Coder-1.5B-Instruct, -0.5B-Instruct and -7B-Instruct.
COMMON = dict(rope_theta=1_000_000.0, max_position_embeddings=32768, hidden_act="silu", rms_norm_eps=1e-6,
              bos_token_id=None, eos_token_id=None, pad_token_id=None)
SHAPES = {
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, tie_word_embeddings=True),
    "1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, tie_word_embeddings=True),
    "7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, tie_word_embeddings=False),
}
PAIRS = {"1.5b/0.5b": ("1.5b", "0.5b"), "7b/0.5b": ("7b", "0.5b")}


class Chars:
    """Stands in for a tokenizer: one character per id, so the engine's text tracking works."""

    eos_token_id = None
    chat_template = None

    def decode(self, ids, **_):
        return "".join(chr(0x4E00 + i % 20000) for i in ids)


def build(name: str, args) -> torch.nn.Module:
    """A model of these shapes with random weights, made on the device in the run's dtype."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = dict(COMMON, **SHAPES[name])
    if args.layers:
        config["num_hidden_layers"] = args.layers
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(args.dtype)  # made in the dtype: a 7B never exists in fp32
    try:
        with torch.device(args.device):
            return Qwen2ForCausalLM(Qwen2Config(**config)).eval()
    finally:
        torch.set_default_dtype(default)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- passes per model and runner ------------------------------------------------------------------


def time_model(module, runner: str, sizes: list[int], last_only: bool, args) -> dict:
    """Medians (ms) of passes over each size after `args.context` cached positions, and the capture."""
    vocab = min(shape["vocab_size"] for shape in SHAPES.values())  # the logit columns both models of a pair share
    context = [(i * 7919 + 13) % 1000 for i in range(args.context)]
    shapes = [(n, last_only) for n in sizes]
    with prefilled(runner, module, vocab, context, max(sizes), shapes) as lm:
        time_passes(lm, context, sizes, 2, last_only=last_only)  # warm-up
        ms = [1000 * s for s in time_passes(lm, context, sizes, args.repeats, last_only=last_only)]
        capturer = getattr(lm, "capturer", None)
        return {"pass_ms": dict(zip(map(str, sizes), ms)),
                "capture_s": {str(n): s for (n, _), s in getattr(lm, "capture_s", {}).items()},
                "captured": capturer is not None and capturer.failed is None and bool(lm.captured),
                "capture_failed": getattr(capturer, "failed", None)}


def time_all(models: dict, args) -> dict:
    out = {}
    for name, module in models.items():
        draft = name == "0.5b"
        sizes = [1] if draft else [1, *(k + 1 for k in CHECK_K)]
        for runner in args.runners:
            began = time.perf_counter()
            out[name, runner] = time_model(module, runner, sizes, draft, args)
            print(f"  {name} {runner}: {out[name, runner]['pass_ms']} ({time.perf_counter() - began:.0f} s)", flush=True)
    return out


def pair_costs(timings: dict, args) -> dict:
    """Per pair and runner: c, the verify cost of each K, and the predicted speedups at ALPHA_CPU."""
    out = {}
    for pair, (target, draft) in PAIRS.items():
        for runner in args.runners:
            t, d = timings[target, runner]["pass_ms"], timings[draft, runner]["pass_ms"]
            c = d["1"] / t["1"]
            verify = {k: t[str(k + 1)] / t["1"] for k in CHECK_K}
            out[pair, runner] = {"c": c, "verify_cost": verify,
                                 "predicted_speedup": {k: predicted_speedup(ALPHA_CPU, k, c, verify[k]) for k in CHECK_K}}
    return out


# --- whole runs ------------------------------------------------------------------------------------


def whole_runs(models: dict, timings: dict, args, label: str) -> dict:
    """Per pair: plain and speculative greedy runs (K = args.k) on the compiled runner, tokens/s from
    the engine's own clock, and seconds per step against what the pass timings account for."""
    out = {}
    prompt = [(i * 31 + 7) % 1000 for i in range(args.prompt_len)]
    for name, (target, draft) in PAIRS.items():
        pair = ModelPair(name, models[target], models[draft], Chars(), args.device, args.dtype, chat=False)
        runs = {}
        for mode in ("plain", "spec", "plain", "spec"):  # the second round is the one kept
            config = GenerationConfig(max_new_tokens=args.tokens, k=args.k, drafter="none" if mode == "plain" else "model",
                                      runner=args.loop_runner)
            events = list(build_decoding(pair, prompt, config))
            runs[mode] = events
        t, d = timings[target, args.loop_runner]["pass_ms"], timings[draft, args.loop_runner]["pass_ms"]
        row = {}
        for mode, events in runs.items():
            seconds = events[-1].elapsed_s
            row[mode] = {"tokens": events[-1].total_tokens, "steps": len(events), "tok_s": events[-1].total_tokens / seconds,
                         "ms_per_step": 1000 * seconds / len(events),
                         "acceptance": sum(e.accepted for e in events) / max(1, sum(len(e.drafted) for e in events))}
        row["speedup"] = row["spec"]["tok_s"] / row["plain"]["tok_s"]
        row["same_tokens"] = [x for e in runs["spec"] for x in e.emitted] == [x for e in runs["plain"] for x in e.emitted]
        accounted = statistics.fmean(len(e.drafted) * d["1"] + check_ms(t, len(e.drafted) + 1) for e in runs["spec"])
        row["spec_step_accounted_ms"] = accounted  # each step's draft passes and its check, from the pass timings
        row["plain_step_accounted_ms"] = t["1"]
        out[name] = row
        print(f"  {label} {name}: {row['speedup']:.2f}x, spec {row['spec']['ms_per_step']:.2f} ms/step "
              f"(accounted {accounted:.2f}), acceptance {row['spec']['acceptance']:.2f}", flush=True)
    return out


def check_ms(timed: dict, n: int) -> float:
    """A check of n tokens from the timed sizes, linear between them (the static runners pad n up
    to their next fixed shape, which the sizes timed here mostly are)."""
    sizes = sorted(int(k) for k in timed)
    above = next((s for s in sizes if s >= n), sizes[-1])
    below = max((s for s in sizes if s <= n), default=sizes[0])
    if above == below:
        return timed[str(above)]
    return timed[str(below)] + (timed[str(above)] - timed[str(below)]) * (n - below) / (above - below)


def force_acceptance(models: dict) -> None:
    """Zero every attention and MLP output projection: each layer adds nothing to the residual
    stream, so the logits are norm(embedding(t)) against the head, whose argmax is t itself for
    random near-orthogonal embeddings when the head is the embedding (an untied head, the 7B's, is
    set to it): both models repeat the last token, every draft is accepted. In place: the captured
    graphs read the same memory."""
    with torch.no_grad():
        for module in models.values():
            for layer in module.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
            head, embed = module.get_output_embeddings().weight, module.get_input_embeddings().weight
            if head.data_ptr() != embed.data_ptr():
                head.copy_(embed)


# --- parity, syncs, a graph of K draft passes ------------------------------------------------------


PARITY_CONFIGS = {
    "greedy k=4": GenerationConfig(k=4, max_new_tokens=40),
    "auto k=4": GenerationConfig(k=4, drafter="auto", max_new_tokens=40),
    "early stop k=6": GenerationConfig(k=6, draft_confidence=0.5, max_new_tokens=40),
    "adaptive": GenerationConfig(k=2, adaptive_k=True, k_max=8, max_new_tokens=40),
}


def parity(args) -> dict:
    """tiny-random in fp32 on the device: each runner's events against eager's (ids, counts, kinds
    exactly; p, q and margins: the largest difference)."""
    pair = load_pair("tiny-random", device=str(args.device), dtype="fp32")
    prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
    ids = pair.encode_prompt(prompt, chat=False, max_new_tokens=40)
    out = {}
    for label, config in PARITY_CONFIGS.items():
        eager = list(build_decoding(pair, ids, config))
        for runner in args.runners[1:]:
            other = list(build_decoding(pair, ids, replace(config, runner=runner)))
            same = [(e.drafted, e.accepted, e.emitted, e.kind) for e in eager] == [(e.drafted, e.accepted, e.emitted, e.kind) for e in other]
            diff = max((abs(a - b) for e, o in zip(eager, other) for f in ("p_target", "p_draft", "margins")
                        for a, b in zip(getattr(e, f), getattr(o, f))), default=0.0)
            out[f"{label} {runner}"] = {"same_events": same, "max_float_difference": diff}
    return out


def sync_counts(models: dict, args) -> dict | None:
    """Synchronizing CUDA calls per steady-state step, the 1.5B pair, K = 5, each runner."""
    if args.device.type != "cuda":
        return None
    pair = ModelPair("1.5b/0.5b", models["1.5b"], models["0.5b"], Chars(), args.device, args.dtype, chat=False)
    out = {}
    for runner in args.runners:
        run = iter(build_decoding(pair, list(range(100, 164)), GenerationConfig(k=5, max_new_tokens=24, runner=runner)))
        next(run), next(run)  # the prompt, a first step
        counts = []
        for _ in range(4):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    next(run)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            counts.append(sum("synchroniz" in str(w.message) for w in caught))
        for _ in run:
            pass
        out[runner] = counts
    return out


def draft_graph_of_k(models: dict, args) -> dict | None:
    """One CUDA graph of the draft's K greedy one-token passes (each feeding its argmax to the next)
    against K replays of the one-pass graph with the same feeding: ms per draft of K, per K."""
    if args.device.type != "cuda" or "compiled" not in args.runners:
        return None
    from specdec.core.runners.capture import compiled_model

    lm = compiled_model(models["0.5b"], min(shape["vocab_size"] for shape in SHAPES.values()))
    owner = object()
    lm = lm.claim(owner, args.context + 64, [(1, True)])
    if not lm.captured:
        return {"failed": getattr(lm.capturer, "failed", "not captured")}
    lm.prefill(torch.arange(args.context, device=args.device) % 1000)
    out = {}
    for k in (3, 5, 7):
        graph, ids = torch.cuda.CUDAGraph(), lm.input(1)
        with torch.inference_mode():
            lm.start.fill_(lm.position)
            for _ in range(2):  # warm-up on the current stream's allocator, then capture
                fixed_pass(lm.model, lm.kv, ids, lm.start, True, lm.vocab_size)
            with torch.cuda.graph(graph, pool=lm.capturer.pool):
                for _ in range(k):
                    logits = fixed_pass(lm.model, lm.kv, ids, lm.start, True, lm.vocab_size)
                    ids.copy_(logits.argmax(dim=-1))
                    lm.start.add_(1)
        out[k] = {"one_graph_ms": _ms(lambda: (lm.start.fill_(lm.position), graph.replay()), args),
                  "k_replays_ms": _ms(lambda: _k_replays(lm, k), args)}
    lm.release(owner)
    return out


def _k_replays(lm, k: int) -> None:
    for i in range(k):
        lm.start.fill_(lm.position + i)
        logits = lm.captured[1, True]()
        lm.input(1).copy_(logits.argmax(dim=-1))


def _ms(fn, args, reps: int = 20) -> float:
    times = []
    for _ in range(reps):
        sync(args.device)
        began = time.perf_counter()
        fn()
        sync(args.device)
        times.append(time.perf_counter() - began)
    return 1000 * statistics.median(times)


# --- the record and the table -----------------------------------------------------------------------


def keyed(d: dict) -> dict:
    """Tuple keys as "a b" strings (JSON)."""
    return {" ".join(map(str, k)) if isinstance(k, tuple) else str(k): v for k, v in d.items()}


def print_table(record: dict, args) -> None:
    print("\nper pass (ms): one token, then the check of K+1 for K =", ", ".join(map(str, CHECK_K)))
    for key, row in record["passes"].items():
        cap = row["capture_s"]
        captured = f"  captured in {sum(cap.values()):.1f} s" if cap else ""
        failed = f"  NOT CAPTURED: {row['capture_failed']}" if row["capture_failed"] and key.endswith("compiled") else ""
        print(f"  {key:<16} " + "  ".join(f"{n}:{ms:7.2f}" for n, ms in row["pass_ms"].items()) + captured + failed)
    print(f"\nc, verify cost and predicted speedup at alpha {ALPHA_CPU} (K = {', '.join(map(str, CHECK_K))})")
    for key, row in record["costs"].items():
        verify = " ".join(f"{v:.2f}" for v in row["verify_cost"].values())
        speed = " ".join(f"{v:.2f}x" for v in row["predicted_speedup"].values())
        print(f"  {key:<20} c {row['c']:.3f}   verify {verify}   predicted {speed}")
    for label in ("loop_cost", "forced_acceptance"):
        print(f"\n{label.replace('_', ' ')} ({args.loop_runner} runner, K = {args.k}, {args.tokens} tokens):")
        for name, row in record[label].items():
            print(f"  {name:<10} spec/plain {row['speedup']:.2f}x, acceptance {row['spec']['acceptance']:.2f}, spec "
                  f"{row['spec']['ms_per_step']:.2f} ms/step against {row['spec_step_accounted_ms']:.2f} accounted, plain "
                  f"{row['plain']['ms_per_step']:.2f} against {row['plain_step_accounted_ms']:.2f}")
    print("\nparity with eager (tiny-random, fp32):", ", ".join(
        f"{k}: {'same' if v['same_events'] else 'DIFFERENT'} ({v['max_float_difference']:.1e})" for k, v in record["parity"].items()))
    print("host syncs per steady-state step:", record["syncs"] if record["syncs"] is not None else "n/a (no CUDA)")
    print("draft of K as one graph:", record["draft_graph_of_k"] if record["draft_graph_of_k"] is not None else "n/a (no CUDA)")
    print(f"peak GPU memory: {record['peak_gb']} GB, whole check {record['seconds']:.0f} s")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="default: bf16")
    p.add_argument("--layers", type=int, default=None, help="override every model's depth (e.g. 2 for a quick CPU try)")
    p.add_argument("--runners", default=",".join(RUNNERS))
    p.add_argument("--loop-runner", default="compiled", help="the runner of the whole runs")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--context", type=int, default=200, help="cached positions while timing passes")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", default=None, help="the JSON record (default: $OUT/gpu_check.json when $OUT is set)")
    args = p.parse_args(argv)
    args.device, args.dtype = torch.device(args.device), DTYPES[args.dtype or "bf16"]
    args.runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    if args.runners[0] != "eager" or args.loop_runner not in args.runners:
        p.error("--runners must start with eager (the reference) and include --loop-runner")
    if args.k not in CHECK_K:
        p.error(f"--k must be one of {CHECK_K} (the check sizes timed)")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    began = time.perf_counter()
    name = torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else "cpu"
    print(f"device {name}, {str(args.dtype).removeprefix('torch.')}, torch {torch.__version__}, layers "
          f"{args.layers or 'as the real models'}; random weights, no download", flush=True)
    models = {n: build(n, args) for n in SHAPES}
    if args.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(args.device)
    print("passes:", flush=True)
    timings = time_all(models, args)
    record = {"device": name, "torch": torch.__version__, "dtype": str(args.dtype), "layers": args.layers,
              "alpha_cpu": ALPHA_CPU, "passes": keyed(timings), "costs": keyed(pair_costs(timings, args))}
    print("whole runs:", flush=True)
    record["loop_cost"] = whole_runs(models, timings, args, "random weights")
    force_acceptance(models)
    record["forced_acceptance"] = whole_runs(models, timings, args, "forced acceptance")
    record["syncs"] = sync_counts(models, args)
    record["draft_graph_of_k"] = draft_graph_of_k(models, args)
    del models
    print("parity:", flush=True)
    record["parity"] = parity(args)
    record["peak_gb"] = round(torch.cuda.max_memory_allocated(args.device) / 2**30, 2) if args.device.type == "cuda" else None
    record["seconds"] = time.perf_counter() - began
    out = args.out or (os.path.join(os.environ["OUT"], "gpu_check.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
        print(f"record: {out}")
    print_table(record, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
