"""Per target kernel on the embedded pair: resident memory, decode step, weight difference from the
GGUF, and agreement with the bf16 kernel on the bench prompts.

    flock /tmp/specdec-heavy.lock .venv/bin/python scripts/target_kernels.py --kernels bf16,int8,q4k --out kernels.json

- resident memory: bytes of the kernel model's parameters and buffers (GB);
- decode step: one one-token target pass after a prefilled prompt, median of `--passes`;
- max weight difference: the largest |w - w_gguf| over every weight tensor of the GGUF, where
  w_gguf is the gguf package's float32 dequantization and w the weight the kernel computes with
  (bf16: the converted copy as loaded; int8: q * scale; q4k: (q - 8) * scale + zero with scale and
  zero as the int4 kernel holds them, the dense Q6_K tensors and the embedding as loaded);
- agreement: how many of the first 64 greedy tokens (plain decoding) equal the bf16 kernel's, per
  bench prompt, position by position.

Results merge into `--out` (JSON), so the kernels may be measured in separate runs (each under the
heavy lock for a few minutes); agreement needs the bf16 kernel's tokens in the file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.kernels import q4k  # noqa: E402
from specdec.bench.runner import load_prompts  # noqa: E402
from specdec.core.cached_model import CachedModel  # noqa: E402
from specdec.kernels.cpu_linear import linear_for  # noqa: E402
from specdec.core.config import GenerationConfig  # noqa: E402
from specdec.engines.assemble import build_decoding  # noqa: E402
from specdec.kernels.quant import QuantEmbedding, QuantLinear, module_bytes  # noqa: E402
from specdec.kernels.target_kernels import hf_name, kernel_target, release  # noqa: E402

AGREE = 64


def decode_step_s(pair, model, prompt_ids: list[int], passes: int) -> float:
    target = CachedModel(model, pair.vocab_size, linear=linear_for(model))
    target.prefill(torch.tensor(prompt_ids[:-1]))
    last = torch.tensor(prompt_ids[-1:])
    times = []
    for _ in range(passes + 2):  # two untimed: first calls pay for allocations
        start = time.perf_counter()
        target.forward(last, last_only=True)
        times.append(time.perf_counter() - start)
        target.crop(len(prompt_ids) - 1)
    return statistics.median(times[2:])


def effective_weight(model, name: str, reference: torch.Tensor, gguf_blocks) -> torch.Tensor:
    """The (out, in) float32 weight module `name` computes with."""
    module = model.get_submodule(name)
    if isinstance(module, q4k.Q4KLinear):
        q, _, _ = q4k.unpack(gguf_blocks, module.in_features)  # the GGUF's own 4-bit values
        scale, zero = module.scale_zero.float().unbind(-1)  # (in/32, out) each, as the kernel holds them
        w = (q.reshape(q.shape[0], -1, q4k.SUB).float() - 8) * scale.T[..., None] + zero.T[..., None]
        return w.reshape(q.shape)
    if isinstance(module, q4k.Q4KEmbedding):
        return q4k.dequantize(module.blocks, module.cols)
    if isinstance(module, (QuantLinear, QuantEmbedding)) and module.bits == 8:
        return module.q.float() * module.scale.float()[:, None]
    return module.weight.float()


def max_weight_difference(model, gguf_path: Path) -> dict:
    import gguf

    reader = gguf.GGUFReader(str(gguf_path))
    worst = {"max_abs": 0.0, "tensor": None}
    for t in reader.tensors:
        if len(t.shape) != 2:
            continue  # norms and biases: float32 in the GGUF and kept as loaded
        reference = torch.from_numpy(np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32))
        blocks = torch.from_numpy(np.array(t.data)) if t.tensor_type == gguf.GGMLQuantizationType.Q4_K else None
        w = effective_weight(model, hf_name(t.name).rsplit(".", 1)[0], reference, blocks)
        diff = (w - reference).abs().max().item()
        if diff > worst["max_abs"]:
            worst = {"max_abs": diff, "tensor": t.name, "type": t.tensor_type.name, "reference_max_abs": reference.abs().max().item()}
    return worst


def first_tokens(pair, name: str, prompts: list[dict]) -> dict:
    config = GenerationConfig(drafter="none", max_new_tokens=AGREE, target_kernel=name)
    out = {}
    for p in prompts:
        ids = pair.encode_prompt(p["prompt"], chat=p.get("chat", pair.chat), max_new_tokens=AGREE)
        out[p["id"]] = [t for e in build_decoding(pair, ids, config) for t in e.emitted]
    return out


def activation_table(calls: int = 40) -> None:
    """Which activation dtype the quantized kernels want on this CPU: one 8960 x 1536 weight (the
    target's gate/up shape), median ms per call at 1 and 6 tokens, against fp32 F.linear."""
    from specdec.kernels.quant import quantize

    w = torch.randn(8960, 1536) * 0.02
    blocks, cpu = q4k.quantize(w), torch.device("cpu")

    def median_ms(f) -> float:
        for _ in range(5):
            f()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            f()
            times.append(time.perf_counter() - start)
        return 1000 * statistics.median(times)

    for n in (1, 6):
        x, row = torch.randn(n, 1536), [f"{n} tokens:"]
        for dt in (torch.float32, torch.bfloat16):
            layer = q4k.Q4KLinear(blocks, 1536, None, torch.float32, dt, cpu)
            row.append(f"int4 {dt}: {median_ms(lambda: layer(x)):.1f}")
        for dt in (torch.float32, torch.bfloat16):
            layer8, xd = QuantLinear(quantize(w, 8), None, dt, cpu), x.to(dt)
            row.append(f"int8 {dt}: {median_ms(lambda: layer8(xd)):.1f}")
        row.append(f"fp32 F.linear: {median_ms(lambda: torch.nn.functional.linear(x, w)):.1f}")
        print("  ".join(row), flush=True)


def main() -> int:
    from specdec.models.bundle import gguf_files
    from specdec.models.pair import load_pair

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="bf16,int8,q4k")
    parser.add_argument("--out", default="target_kernels.json")
    parser.add_argument("--prompts", default=str(Path(__file__).resolve().parents[1] / "assets" / "bench_prompts.json"))
    parser.add_argument("--passes", type=int, default=9, help="timed one-token passes per kernel")
    parser.add_argument("--dtype", default=None, help="the pair's dtype (default: automatic)")
    parser.add_argument("--activations", action="store_true", help="only time one layer per kernel and activation dtype")
    args = parser.parse_args()
    if args.activations:
        activation_table()
        return 0
    out = Path(args.out)
    report = json.loads(out.read_text()) if out.exists() else {"kernels": {}}
    prompts = load_prompts(args.prompts)
    pair = load_pair(dtype=args.dtype)
    pair.draft = None  # the target alone is measured
    report["machine"] = {"dtype": pair.dtype_name, "threads": torch.get_num_threads()}
    gguf_path = gguf_files()[0]
    for name in [k.strip() for k in args.kernels.split(",") if k.strip()]:
        release(pair, keep=name)
        start = time.perf_counter()
        model = kernel_target(pair, name)
        built_s = time.perf_counter() - start
        ids = pair.encode_prompt(prompts[0]["prompt"], chat=pair.chat, max_new_tokens=AGREE)
        row = {
            "ready_s": built_s,
            "resident_gb": module_bytes(model) / 1e9,
            "decode_step_ms": 1000 * decode_step_s(pair, model, ids, args.passes),
            "weight_difference": max_weight_difference(model, gguf_path),
            "tokens": first_tokens(pair, name, prompts),
        }
        report["kernels"][name] = row
        print(json.dumps({name: {k: v for k, v in row.items() if k != "tokens"}}), flush=True)
        out.write_text(json.dumps(report, indent=1))
    base = report["kernels"].get("bf16", {}).get("tokens")
    for name, row in report["kernels"].items():
        if base:
            row["agree_first_64"] = {p: sum(a == b for a, b in zip(row["tokens"][p], base[p])) for p in base if p in row["tokens"]}
    out.write_text(json.dumps(report, indent=1))
    for name, row in report["kernels"].items():
        w = row["weight_difference"]
        agree = row.get("agree_first_64", {})
        print(f"{name:5} {row['resident_gb']:.2f} GB  decode step {row['decode_step_ms']:.0f} ms  "
              f"max |w - gguf| {w['max_abs']:.2e} ({w['tensor']})  agree with bf16: {sorted(agree.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
