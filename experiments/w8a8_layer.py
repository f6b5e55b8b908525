"""One linear layer on each CPU kernel at hand, by token rows: ms per call, weights streamed from memory.

Figures from commit 88b03e3 (docs/benchmarks.md, "One layer": the W8A8 kernel with one activation
scale per row; its per-block successor, f8df972, was timed against it by hand). An experiment kept
for work on the kernels: whole passes are timed by `python -m specdec passes`.

    python -m experiments.w8a8_layer [--shape 8960x1536] [--copies 40]

`--copies` copies of the weight are used in turn, so each call reads its weight from memory as a
whole model's pass does (one layer's weight alone would sit in cache). Every kernel and row count is
timed in interleaved rounds (kernel by kernel within a round), so a change in the machine's load
falls on all of them alike; the table gives medians. Kernels:

- bf16: F.linear with bf16 weights and activations; fp32 (not by default): (W @ x.T).T in fp32, as
  specdec/kernels/cpu_linear.py runs an fp32 pair (what AVX2-only machines run);
- int8 wo: weight-only int8, one scale per row (aten._weight_int8pack_mm), bf16 activations;
- int4 g32: weight-only int4, group 32 (aten._weight_int4pack_mm_for_cpu), bf16 activations;
- fbgemm dyn: torch.ao's dynamic W8A8 (quantized.linear_dynamic): ONE activation scale per call
  (per tensor), so rows are coupled; for reference only;
- _int_mm row: per-row int8 activations quantized in eager torch, then torch._int_mm;
- ours avx512 / ours avx2: specdec/kernels/w8a8.py, each instruction-set path forced.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

from specdec.kernels import w8a8_build
from specdec.kernels.quant import quantize
from specdec.kernels.w8a8 import PATHS, pack


def int_mm_row(x: torch.Tensor, qt: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    """Per-row W8A8 in eager torch: qt is the (K, N) int8 weight, sw its (N,) scales."""
    xf = x.float()
    sx = xf.abs().amax(dim=1, keepdim=True) / 127
    qx = (xf / sx).round().clamp(-127, 127).to(torch.int8)
    return (torch._int_mm(qx, qt).float() * sx * sw).to(x.dtype)


def kernels(n: int, k: int, copies: int, wanted: list[str]) -> dict:
    """name -> (weights per copy, call(x, weight) -> y, input dtype)."""
    out = {}
    g = torch.Generator().manual_seed(0)
    dense = [torch.randn(n, k, generator=g) * 0.02 for _ in range(copies)]
    int8 = [quantize(w, 8) for w in dense]
    if "bf16" in wanted:
        out["bf16"] = ([w.bfloat16() for w in dense], lambda x, w: F.linear(x, w), torch.bfloat16)
    if "fp32" in wanted:  # as specdec/kernels/cpu_linear.py runs fp32 on a CPU: the weight as the left operand
        out["fp32"] = ([w.clone() for w in dense], lambda x, w: (w @ x.T).T, torch.float32)
    if "int8 wo" in wanted:
        out["int8 wo"] = ([(q.q, q.scale.bfloat16()) for q in int8],
                          lambda x, w: torch.ops.aten._weight_int8pack_mm(x, *w), torch.bfloat16)
    if "int4 g32" in wanted:
        out["int4 g32"] = ([_int4(w) for w in dense], lambda x, w: torch.ops.aten._weight_int4pack_mm_for_cpu(x, w[0], 32, w[1]),
                           torch.bfloat16)
    if "fbgemm dyn" in wanted:
        out["fbgemm dyn"] = ([_fbgemm(w) for w in dense], lambda x, w: w(x), torch.float32)
    if "_int_mm row" in wanted:
        out["_int_mm row"] = ([(q.q.T.contiguous(), q.scale) for q in int8], lambda x, w: int_mm_row(x, *w), torch.bfloat16)
    packed = [(pack(q.q), q.scale) for q in int8]
    for path in ("avx512", "avx2"):
        name = f"ours {path}"
        if name in wanted and path in w8a8_build.paths():
            code = PATHS[path]
            out[name] = (packed, lambda x, w, code=code: torch.ops.specdec.w8a8_linear(x, w[0], w[1], None, n, code), torch.bfloat16)
    return out


def _int4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q = quantize(w, 4)
    from specdec.kernels.quant import unpack_nibbles

    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(unpack_nibbles(q.q).to(torch.int32), 1)
    return packed, torch.stack([q.scale, q.zero], dim=-1).transpose(0, 1).contiguous()


def _fbgemm(w: torch.Tensor):
    linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
    linear.weight.data.copy_(w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8)[0]


def measure(table: dict, k: int, rows: list[int], rounds: int) -> dict:
    """(name, M) -> median ms per call, over `rounds` interleaved rounds of one call each."""
    times: dict = {(name, m): [] for name in table for m in rows}
    xs = {(m, dt): torch.randn(m, k).to(dt) for m in rows for dt in (torch.bfloat16, torch.float32)}
    step = 0
    with torch.inference_mode():
        for r in range(rounds + 3):  # the first rounds warm up
            for name, (weights, call, dtype) in table.items():
                for m in rows:
                    w = weights[step % len(weights)]
                    step += 1
                    start = time.perf_counter()
                    call(xs[m, dtype], w)
                    if r >= 3:
                        times[name, m].append((time.perf_counter() - start) * 1e3)
    return {key: statistics.median(v) for key, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="8960x1536", help="N x K of the layer (out x in)")
    p.add_argument("--copies", type=int, default=40)
    p.add_argument("--rows", default="1,2,4,6,8,16")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--kernels", default="bf16,int8 wo,int4 g32,fbgemm dyn,_int_mm row,ours avx512,ours avx2")
    args = p.parse_args()
    n, k = (int(v) for v in args.shape.lower().split("x"))
    rows = [int(m) for m in args.rows.split(",")]
    w8a8_build.load()
    table = kernels(n, k, args.copies, [s.strip() for s in args.kernels.split(",")])
    result = measure(table, k, rows, args.rounds)
    print(f"layer {n}x{k}, {args.copies} weight copies, {torch.get_num_threads()} threads, median ms per call of {args.rounds}")
    print("| kernel | " + " | ".join(f"M{m}" for m in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for name in table:
        print(f"| {name} | " + " | ".join(f"{result[name, m]:.2f}" for m in rows) + " |")


if __name__ == "__main__":
    main()
