"""How far each way of quantizing the target's linear layers moves it from the dense target.

Figures from commit 322599e (docs/benchmarks.md, "Activations per block of 128 columns"). An
experiment kept for work on the target kernels: the bench's faithfulness figures (top-1 agreement
with bf16) are its everyday measure, this the finer one.

Along the dense (bf16) target's own greedy output on the bench prompts (64 new tokens each), every
candidate is run teacher-forced in one pass per prompt, and compared with the dense model's next-token
distribution at every position: the mean and median KL divergence, the top-1 agreement with the dense
output, and the dense model's top-2 logit margin at each position where the candidate's top-1
differs (0.125 is one bf16 step of a logit near 20: a tie).

Candidates are of two kinds:
- simulated (`--simulate`): the dense model with each linear layer computed in fp32 from weights
  and activations rounded to a given grid, the rest of the model in bf16. Names: dense (no rounding),
  w8 (weights int8, one scale per output channel), a8row (activations int8, one scale per row),
  a8gN (one scale per N columns of each row), and their combinations joined with '+', and
  `+smoothA` (SmoothQuant: a scale per input channel moved from activations to weights,
  max|x|^A / max|w|^(1-A), from a calibration text that is not a bench prompt);
- real (`--kernels`): this project's target kernels as they run (specdec/kernels/target_kernels.py).

    python -m experiments.w8a8_error --simulate dense,w8+a8row,w8,a8row,w8+a8g128 --kernels w8a8,q4k
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from specdec.bench.policies import mode_config
from specdec.bench.runner import DEFAULT_PROMPTS, run_ours
from specdec.kernels.target_kernels import kernel_target
from specdec.models.pair import load_pair

ROOT = Path(__file__).resolve().parent.parent


def weights_int8(w: torch.Tensor) -> torch.Tensor:
    s = w.abs().amax(1, keepdim=True) / 127  # (N, 1): one scale per output channel
    return (w / s).round().clamp(-127, 127) * s


def activations_int8(block: int | None):
    """x (..., K) -> x rounded to int8 with one scale per row (block None) or per `block` columns."""
    def rounded(x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        width = shape[-1] if block is None else block
        xb = F.pad(x, (0, -shape[-1] % width)).reshape(*shape[:-1], -1, width)
        s = (xb.abs().amax(-1, keepdim=True) / 127).clamp_min(1e-30)
        return ((xb / s).round().clamp(-127, 127) * s).reshape(*shape[:-1], -1)[..., : shape[-1]]
    return rounded


def calibration_maxima(model: nn.Module, tokenizer, linears: dict) -> dict:
    """name -> (K,) max |x| per input channel of each linear layer, over a text that is no bench prompt."""
    found: dict = {}
    hooks = []
    for name, module in linears.items():
        def hook(mod, inputs, out, name=name):
            a = inputs[0].detach().float().abs().reshape(-1, inputs[0].shape[-1]).amax(0)
            found[name] = torch.maximum(found[name], a) if name in found else a
        hooks.append(module.register_forward_hook(hook))
    text = (ROOT / "docs" / "metrics.md").read_text()[:3000] + "\n" + Path(json.__file__).read_text()[:4000]
    with torch.inference_mode():
        model(torch.tensor([tokenizer(text)["input_ids"][:1200]]))
    for h in hooks:
        h.remove()
    return found


def smoothing(linears: dict, maxima: dict, alpha: float) -> dict:
    """name -> (K,) SmoothQuant scale, shared by the layers that read one input (q/k/v, gate/up)."""
    groups: dict = {}
    for name in linears:
        parent, _, leaf = name.rpartition(".")
        shared = "qkv" if leaf in ("q_proj", "k_proj", "v_proj") else "gate_up" if leaf in ("gate_proj", "up_proj") else leaf
        groups.setdefault((parent, shared), []).append(name)
    out = {}
    for names in groups.values():
        wmax = torch.stack([linears[n].weight.detach().float().abs().amax(0) for n in names]).amax(0)
        s = (maxima[names[0]].clamp_min(1e-5) ** alpha / wmax.clamp_min(1e-5) ** (1 - alpha)).clamp_min(1e-5)
        out.update({n: s for n in names})
    return out


def simulate(linears: dict, recipe: str, maxima: dict) -> None:
    """Replace each linear layer's forward with the rounded arithmetic `recipe` names."""
    parts = recipe.split("+")
    smooth = next((smoothing(linears, maxima, float(p[6:])) for p in parts if p.startswith("smooth")), None)
    act = next((activations_int8(None if p == "a8row" else int(p[3:])) for p in parts if p.startswith("a8")), None)
    for name, module in linears.items():
        s = None if smooth is None else smooth[name]
        w = module.weight.detach().float() * (1 if s is None else s)
        w = weights_int8(w) if "w8" in parts else w
        b = None if module.bias is None else module.bias.detach().float()

        def forward(x, w=w, b=b, s=s):
            xf = x.float() / (1 if s is None else s)
            return F.linear(act(xf) if act else xf, w, b).to(x.dtype)
        module.forward = forward


@torch.inference_mode()
def forced_logits(model: nn.Module, prompts: list[list[int]], outputs: list[list[int]]) -> list[torch.Tensor]:
    """Per prompt, (R, V) next-token logits along the output, in one pass."""
    return [model(torch.tensor([ids + out[:-1]])).logits[0, len(ids) - 1 :].float() for ids, out in zip(prompts, outputs)]


def compare(logits: list, dense: list, outputs: list) -> str:
    kl, agree, total, flips = [], 0, 0, []
    for lg, d, out in zip(logits, dense, outputs):
        kl.append(F.kl_div(lg.log_softmax(-1), d.log_softmax(-1), log_target=True, reduction="none").sum(-1))
        top = lg.argmax(-1)
        wanted = torch.tensor(out)
        agree, total = agree + int((top == wanted).sum()), total + len(out)
        two = d.topk(2, -1).values
        flips += [round(float(m), 3) for m in (two[:, 0] - two[:, 1])[top != wanted]]
    kl = torch.cat(kl)
    return f"KL mean {kl.mean():.5f} median {kl.median():.6f}, top-1 {agree / total:.4f}, flips at dense margins {flips}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--simulate", default="dense,w8+a8row,w8,a8row,w8+a8g256,w8+a8g128,w8+a8row+smooth0.5")
    p.add_argument("--kernels", default="w8a8,q4k", help="this project's target kernels, run as they are")
    p.add_argument("--prompts", default=DEFAULT_PROMPTS)
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    pair = load_pair()
    prompts = json.loads(Path(args.prompts).read_text())
    encoded = [pair.encode_prompt(q["prompt"], chat=q.get("chat", pair.chat), max_new_tokens=args.max_new_tokens) for q in prompts]
    outputs = [run_ours(pair, ids, mode_config("plain", 5, args.max_new_tokens, "constant"))["ids"] for ids in encoded]
    model = pair.target
    dense = forced_logits(model, encoded, outputs)
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    maxima = calibration_maxima(model, pair.tokenizer, linears)
    print(f"{pair.name}, {pair.dtype_name}, {len(prompts)} prompts x {args.max_new_tokens} tokens, against the dense target")
    for recipe in filter(None, args.simulate.split(",")):
        start = time.perf_counter()
        simulate(linears, recipe, maxima)
        line = compare(forced_logits(model, encoded, outputs), dense, outputs)
        for m in linears.values():
            del m.forward  # back to the class's own forward
        print(f"simulated {recipe:24s} {line} ({time.perf_counter() - start:.0f} s)", flush=True)
    for kernel in filter(None, args.kernels.split(",")):
        print(f"kernel    {kernel:24s} {compare(forced_logits(kernel_target(pair, kernel), encoded, outputs), dense, outputs)}", flush=True)


if __name__ == "__main__":
    main()
