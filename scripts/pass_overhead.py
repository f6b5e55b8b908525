"""How much of one target pass is not matrix work, and what a static cache and torch.compile change.

    HF_HUB_OFFLINE=1 flock /tmp/specdec-heavy.lock python scripts/pass_overhead.py overhead [--dtype fp32] [--threads 1 --clock process]
    HF_HUB_OFFLINE=1 flock /tmp/specdec-heavy.lock python scripts/pass_overhead.py compile [--dtype fp32]

`overhead`: the embedded target (converted copy), 200 cached positions, one decode pass (1 token)
and one verify pass (6 tokens) as the engine runs them (specdec.core.cached_model), median of interleaved
repeats; then the same with every linear layer replaced by a no-op that returns zeros of the right
shape (what is left: attention, norms, rotary, the cache, Python); then torch.profiler's top
operators of one pass of each kind.
`compile`: the same passes over a transformers StaticCache, eager and under torch.compile (the
seconds of the first call of each shape, which compiles; then the medians). Run it twice with the
same TORCHINDUCTOR_CACHE_DIR to see what the on-disk cache saves on a restart.
Prints one JSON object per measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specdec.models.bundle import cache_root  # noqa: E402
from specdec.core.cached_model import CachedModel  # noqa: E402
from specdec.kernels.cpu_linear import linear_for  # noqa: E402

CONTEXT = 200  # cached positions while timing (as in DESIGN.md's pass costs)
SIZES = (1, 6)  # a decode pass; a verify pass of K + 1 = 6 tokens
REPEATS = 7


def load_target(dtype: str):
    from transformers import AutoModelForCausalLM

    folder = next(p for p in (cache_root() / "qwen2.5-coder-gguf").iterdir() if p.name.startswith("qwen2.5-coder-1.5b"))
    return AutoModelForCausalLM.from_pretrained(folder, dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]).eval()


def ids_for(model, n: int) -> torch.Tensor:
    return (torch.arange(n) * 7919 + 13) % model.config.vocab_size  # any tokens: cost does not depend on which


CLOCK = time.perf_counter  # --clock process: CPU seconds of this process (steadier on a shared machine, with --threads 1)


def median_passes(run, sizes=SIZES, repeats=REPEATS) -> dict[int, float]:
    """run(n) performs one pass over n tokens and rolls back; sizes interleaved over the repeats."""
    for n in sizes:
        run(n)  # warm-up
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            start = CLOCK()
            run(n)
            times[n].append(CLOCK() - start)
    return {n: statistics.median(t) for n, t in times.items()}


def noop_linears(model) -> None:
    def zeros(self, x):
        return x.new_zeros(*x.shape[:-1], self.out_features)

    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.forward = types.MethodType(zeros, m)


def overhead(dtype: str) -> None:
    model = load_target(dtype)
    cm = CachedModel(model, model.config.vocab_size, linear=linear_for(model))
    feed = ids_for(model, CONTEXT + max(SIZES))
    cm.prefill(feed[:CONTEXT])

    def engine_pass(n):
        cm.forward(feed[CONTEXT : CONTEXT + n], last_only=False)
        cm.crop(CONTEXT)

    full = median_passes(engine_pass)
    print(json.dumps({"what": "engine pass", "dtype": dtype, "seconds": full}), flush=True)
    from torch.profiler import ProfilerActivity, profile

    for n in SIZES:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            engine_pass(n)
        rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
        total = sum(e.self_cpu_time_total for e in prof.key_averages())
        print(json.dumps({"what": "profile", "tokens": n, "total_self_ms": total / 1e3,
                          "top": [(e.key, round(e.self_cpu_time_total / 1e3, 1), e.count) for e in rows]}), flush=True)
    noop_linears(model)
    rest = median_passes(engine_pass)
    cm.linear = None  # without the torch function mode that picks the product's operand order
    rest_no_mode = median_passes(engine_pass)
    print(json.dumps({"what": "linears replaced by no-ops", "dtype": dtype, "seconds": rest,
                      "seconds_without_cpulinear_mode": rest_no_mode,
                      "share_not_matrix": {n: rest[n] / full[n] for n in SIZES}}), flush=True)


def compiled(dtype: str, mode: str) -> None:
    from transformers import StaticCache

    model = load_target(dtype)
    cache = StaticCache(config=model.config, max_cache_len=CONTEXT + 32)
    feed = ids_for(model, CONTEXT + max(SIZES))

    def forward(ids, position):
        # position: (n,) positions of ids
        return model(input_ids=ids[None], cache=cache, position_ids=position[None], use_cache=True).logits

    def rollback():
        # a static cache writes at its layers' running length: setting it back is the rollback
        for layer in cache.layers:
            layer.cumulative_length.fill_(CONTEXT)

    with torch.inference_mode():
        forward(feed[:CONTEXT], torch.arange(CONTEXT))
        positions = {n: torch.arange(CONTEXT, CONTEXT + n) for n in SIZES}

        def static_pass(fn):
            return lambda n: (fn(feed[CONTEXT : CONTEXT + n], positions[n]), rollback())

        eager = median_passes(static_pass(forward))
        print(json.dumps({"what": "static cache, eager", "dtype": dtype, "seconds": eager}), flush=True)
        fn = torch.compile(forward, mode=mode, dynamic=False)
        first = {}
        for n in SIZES:
            start = time.perf_counter()
            fn(feed[CONTEXT : CONTEXT + n], positions[n])
            first[n] = time.perf_counter() - start
            rollback()
        print(json.dumps({"what": "torch.compile first call (compiles)", "mode": mode, "seconds": first}), flush=True)
        timed = median_passes(static_pass(fn))
        print(json.dumps({"what": "static cache, compiled", "mode": mode, "dtype": dtype, "seconds": timed,
                          "over_eager": {n: timed[n] / eager[n] for n in SIZES}}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["overhead", "compile"])
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--mode", default="default", help="torch.compile mode")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--clock", choices=["wall", "process"], default="wall")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "process" else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "clock": args.clock}), flush=True)
    if args.what == "overhead":
        overhead(args.dtype)
    else:
        compiled(args.dtype, args.mode)


if __name__ == "__main__":
    main()
