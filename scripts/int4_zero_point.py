"""How far the CPU int4 kernel's weights are from `QuantWeight.dequantize()`, over a real model.

torch's CPU kernel (`aten._weight_int4pack_mm_for_cpu`) computes w = (q - 8) * scale + zero with
scale and zero in the activations' dtype (bf16 on a CPU: specdec.kernels.variants.compute_dtype). This
quantizes every linear layer of the embedded pair's converted draft with `quantize(w, 4)` and
compares, weight by weight, what the kernel is given against `dequantize()`, in units of that
group's quantization step (its scale). Prints the largest difference, a high percentile, and how
many weights are off by more than a tenth of a step; `--kernel` also checks the figures against
the kernel itself on one layer (identity input).

    HF_HUB_OFFLINE=1 flock /tmp/specdec-heavy.lock python scripts/int4_zero_point.py [folder]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specdec.kernels.quant import QuantLinear, quantize, unpack_nibbles  # noqa: E402

DEFAULT = Path.home() / ".cache/specdec/qwen2.5-coder-gguf/qwen2.5-coder-0.5b-instruct-awq"


def kernel_weight(qw, dtype=torch.bfloat16) -> torch.Tensor:
    """(out, in) float32: the weight the kernel computes with, from the scale and zero QuantLinear hands it."""
    scale_zero = QuantLinear(qw, None, dtype, torch.device("cpu"), kernel=True).scale.float()  # (G, out, 2)
    scale, zero = scale_zero[..., 0].T, scale_zero[..., 1].T  # (out, G)
    q = unpack_nibbles(qw.q).float()  # (out, in)
    out, cols = q.shape
    q = q.reshape(out, cols // qw.group, qw.group)
    return ((q - 8) * scale[..., None] + zero[..., None]).reshape(out, cols)


def step_error(qw) -> torch.Tensor:
    """(out, in) |kernel weight - dequantize()| in units of the group's step."""
    diff = (kernel_weight(qw) - qw.dequantize()).abs()
    out, cols = diff.shape
    step = qw.scale.float().abs()[..., None]  # (out, G, 1)
    return (diff.reshape(out, cols // qw.group, qw.group) / step).reshape(out, cols)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", nargs="?", default=str(DEFAULT))
    ap.add_argument("--kernel", action="store_true", help="also run the kernel on an identity input for one layer")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.folder, dtype=torch.float32)
    worst, worst_name, over_tenth, total, samples = 0.0, "", 0, 0, []
    sq_weight = sq_stored = sq_kernel = 0.0  # sums of squares: the weights, and the two errors against them
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module.in_features % 32:
            continue
        qw = quantize(module.weight, 4)
        err = step_error(qw)
        w = module.weight.detach().float()
        sq_weight += float(w.square().sum())
        sq_stored += float((qw.dequantize() - w).square().sum())
        sq_kernel += float((kernel_weight(qw) - w).square().sum())
        if err.max().item() > worst:
            worst, worst_name = err.max().item(), name
        over_tenth += int((err > 0.1).sum())
        total += err.numel()
        samples.append(err.flatten()[torch.randperm(err.numel(), generator=torch.Generator().manual_seed(0))[:20000]])
    high = torch.quantile(torch.cat(samples), 0.9999).item()
    print(f"weights: {total}; largest |kernel - dequantize()|: {worst:.3f} steps ({worst_name}); "
          f"99.99th percentile {high:.4f} steps; over 0.1 step: {over_tenth} ({over_tenth / total:.2e})")
    print(f"rms error against the weights, relative to their rms: dequantize() {(sq_stored / sq_weight) ** 0.5:.5f}, "
          f"kernel {(sq_kernel / sq_weight) ** 0.5:.5f}")
    if args.kernel and worst_name:  # (nothing to check when no weight differs)
        module = model.get_submodule(worst_name)
        qw = quantize(module.weight, 4)
        layer = QuantLinear(qw, None, torch.bfloat16, torch.device("cpu"), kernel=True)
        eye = torch.eye(module.in_features, dtype=torch.bfloat16)
        got = layer(eye).float().T  # (out, in): the kernel's weights, rounded to bf16 on the way out
        print(f"kernel on {worst_name}: largest |kernel(I) - dequantize()| "
              f"{((got - qw.dequantize()).abs() / qw.scale.float().repeat_interleave(qw.group, 1)).max().item():.3f} steps "
              f"(includes the bf16 rounding of the output)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
