"""One model's worth of the target's layers on this tree's int8-activation kernels and on a commit's, in one
process, sweeps alternating: before and after a kernel change, side by side on a noisy machine.

The commit's kernel sources (`specdec/kernels/csrc/`) are compiled as in specdec/kernels/w8a8_build.py,
with their ops registered under `specdec_before` instead of `specdec`, and loaded beside this tree's
library. Each sweep runs every layer once (28 layers of q, k, v, o, gate, up and down, all on the
kernel, random weights), weights from memory; the sweeps alternate before and after, and the table
gives the medians and the median of the paired ratios. The two must give the same bits (checked first).
An experiment kept for work on the kernels (docs/benchmarks.md, "The AVX2 paths read each block of
weights once for every pass", was measured with it at commit 0913402 against the change after it):

    HF_HUB_OFFLINE=1 .venv/bin/python -m experiments.kernel_before_after --before 0913402 \
        [--kernel w4a8] [--rows 1,4,6] [--path avx2] [--repeats 12]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from specdec.kernels import q4k, quant, w8a8_build
from specdec.kernels.w4a8 import W4A8Linear
from specdec.kernels.w8a8 import W8A8Linear

HIDDEN, MLP, KV, LAYERS = 1536, 8960, 256, 28  # the embedded target's shapes
SHAPES = [(HIDDEN, HIDDEN), (KV, HIDDEN), (KV, HIDDEN), (HIDDEN, HIDDEN), (MLP, HIDDEN), (MLP, HIDDEN), (HIDDEN, MLP)]  # (out, in)
BEFORE = "specdec_before"


def build_before(commit: str, folder: Path) -> Path:
    """The commit's kernel library, its ops under BEFORE; its path."""
    root = Path(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip())
    csrc = "specdec/kernels/csrc"
    names = subprocess.check_output(["git", "-C", str(root), "ls-tree", "--name-only", f"{commit}:{csrc}"], text=True).split()
    for name in names:
        text = subprocess.check_output(["git", "-C", str(root), "show", f"{commit}:{csrc}/{name}"], text=True)
        (folder / name).write_text(re.sub(r"TORCH_LIBRARY(_FRAGMENT|_IMPL)?\(specdec,", rf"TORCH_LIBRARY\1({BEFORE},", text))
    includes, libraries = w8a8_build._torch_paths()
    library = folder / "libbefore.so"
    sources = [str(folder / p.name) for p in w8a8_build.SOURCES]
    argv = [w8a8_build.compiler(), *w8a8_build.FLAGS, *(f for p in includes for f in ("-isystem", p)), *sources, "-o", str(library),
            *(f"-L{p}" for p in libraries), "-lc10", "-ltorch_cpu", *(f"-Wl,-rpath,{p}" for p in libraries)]
    print(f"building {commit}'s kernels (about 30 s)", flush=True)
    subprocess.run(argv, check=True)
    return library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the commit to compare this tree with")
    parser.add_argument("--kernel", default="w4a8", choices=["w4a8", "w8a8"])
    parser.add_argument("--rows", default="1,4,6", help="comma-separated rows a call (1: a decode step; K+1: a check)")
    parser.add_argument("--path", default="auto", choices=list(w8a8_build.PATHS))
    parser.add_argument("--repeats", type=int, default=12, help="sweeps of each (the first is left out)")
    args = parser.parse_args()
    rows_list = [int(r) for r in args.rows.split(",")]
    path = w8a8_build.PATHS[args.path]
    w8a8_build.load()
    with tempfile.TemporaryDirectory() as tmp:
        torch.ops.load_library(str(build_before(args.before, Path(tmp))))
    torch.manual_seed(0)
    if args.kernel == "w4a8":
        weights = {s: q4k.quantize(torch.randn(*s) * 0.02) for s in set(SHAPES)}
        layers = [W4A8Linear(weights[s], s[1], None, torch.device("cpu"), path=path) for _ in range(LAYERS) for s in SHAPES]
    else:
        weights = {s: quant.quantize(torch.randn(*s) * 0.02, 8) for s in set(SHAPES)}
        layers = [W8A8Linear(weights[s], None, torch.device("cpu"), path=path) for _ in range(LAYERS) for s in SHAPES]

    def call(ops, layer, x):
        if args.kernel == "w4a8":
            return ops.w4a8_linear(x, layer.packed, None, layer.out_features, path)
        return ops.w8a8_linear(x, layer.packed, layer.scale, None, layer.out_features, path)

    sides = {"before": getattr(torch.ops, BEFORE), "after": torch.ops.specdec}
    inputs = {(r, k): torch.randn(r, k, dtype=torch.bfloat16) for r in rows_list for k in (HIDDEN, MLP)}
    for rows in rows_list:
        for layer in layers[: len(SHAPES)]:
            x = inputs[(rows, layer.in_features)]
            if not torch.equal(call(sides["before"], layer, x), call(sides["after"], layer, x)):
                raise SystemExit(f"before and after differ ({rows} rows, layer {layer.out_features} x {layer.in_features})")
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeats):
        for rows in rows_list:
            for side, ops in sides.items():
                start = time.perf_counter()
                for layer in layers:
                    call(ops, layer, inputs[(rows, layer.in_features)])
                times.setdefault((side, rows), []).append(time.perf_counter() - start)
    gigabytes = sum(layer.packed.numel() for layer in layers) / 1e9
    print(f"{args.kernel}, path {args.path}, {gigabytes:.3f} GB a sweep, medians of {args.repeats - 1} sweeps")
    print("| rows | before ms | after ms | after / before | median paired ratio |\n|---:|---:|---:|---:|---:|")
    for rows in rows_list:
        before, after = (times[(side, rows)][1:] for side in sides)
        ratio = statistics.median(b / a for a, b in zip(before, after))
        b, a = statistics.median(before), statistics.median(after)
        print(f"| {rows} | {b * 1e3:.1f} | {a * 1e3:.1f} | {a / b:.3f} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
