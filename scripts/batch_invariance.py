"""Which ops of a target pass give a row other bits when other rows share the pass (batch invariance).

    .venv/bin/python scripts/batch_invariance.py \
        [--pair tiny-random] [--dtype fp32] [--kernel w8a8] [--prefix 200] [--sizes 2,6,16] [--runners eager,static]

After a cached prefix, a check of n rows is fed in one pass (n = 2, 6, 16), then the same rows one
token at a time (each a one-token pass, as plain decoding runs them), on the eager runner's
DynamicCache (no mask for a one-token pass) and on the static runner's preallocated cache (a mask
over its capacity, fixed shapes). Every op of every layer is recorded for each row: the embedding,
the norms, the linear layers, rotary, the attention over the cache, the MLP's product, the residual
adds, the head. The report gives, per runner and n:
- the first op whose output for some row differs from that row's one-token pass (everything after
  it differs as a consequence);
- every op whose inputs are the same bits in both passes but whose output is not: an op that
  depends on how many rows share the pass.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.core.runners.eager_model import CachedModel  # noqa: E402
from specdec.core.runners.static_model import StaticModel  # noqa: E402
from specdec.kernels.cpu_linear import linear_for  # noqa: E402
from specdec.kernels.batch_invariant import MARK, make_batch_invariant  # noqa: E402
from specdec.core.runners.attention import PACKED  # noqa: E402
from specdec.kernels.target_kernels import kernel_target  # noqa: E402
from specdec.models import machine  # noqa: E402
from specdec.models.pair import load_pair  # noqa: E402

# The ops of one decoder layer in the order they run: (op, its inputs, its output), each a recorded
# tensor of the row (keys relative to the layer, "prev" the layer's input).
LAYER_OPS = (
    ("input_layernorm", ("in",), "input_layernorm"),
    ("q_proj", ("input_layernorm",), "q_proj"),
    ("k_proj", ("input_layernorm",), "k_proj"),
    ("v_proj", ("input_layernorm",), "v_proj"),
    ("rotary (q)", ("q_proj", "@cos", "@sin"), "attn.q"),
    ("rotary (k)", ("k_proj", "@cos", "@sin"), "attn.k_new"),
    ("attention over the cache", ("attn.q", "attn.k_span", "attn.v_span"), "attn.out"),
    ("o_proj", ("attn.out",), "o_proj"),
    ("residual add (attention)", ("in", "o_proj"), "post_attention_layernorm.in"),
    ("post_attention_layernorm", ("post_attention_layernorm.in",), "post_attention_layernorm"),
    ("gate_proj", ("post_attention_layernorm",), "gate_proj"),
    ("up_proj", ("post_attention_layernorm",), "up_proj"),
    ("act_fn", ("gate_proj",), "act_fn"),
    ("act * up", ("act_fn", "up_proj"), "down_proj.in"),
    ("down_proj", ("down_proj.in",), "down_proj"),
    ("residual add (MLP)", ("post_attention_layernorm.in", "down_proj"), "out"),
)


class Recorder:
    """Hooks on the model's modules and its attention function; `rows[i][key]` is row i's tensor."""

    def __init__(self, model, start: int):
        self.model, self.start = model, start  # start: the position of the pass's first row
        self.rows: list[dict[str, torch.Tensor]] = []
        self.handles = []
        names = {m: n for n, m in model.named_modules()}
        for module, name in names.items():
            short = name.replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "")
            if name.endswith(("input_layernorm", "post_attention_layernorm", "_proj", "act_fn", "embed_tokens", "rotary_emb",
                              "model.norm", "lm_head")) or short.count(".") == 0 and short.startswith("L"):
                self.handles.append(module.register_forward_hook(self._hook(short), with_kwargs=True))
        from transformers import AttentionInterface

        self.name = model.config._attn_implementation
        self.attention = AttentionInterface._global_mapping[self.name]
        AttentionInterface.register(self.name, self._attention)

    def _put(self, key: str, tensor: torch.Tensor, dim: int) -> None:
        for i in range(tensor.shape[dim]):
            while len(self.rows) <= i:
                self.rows.append({})
            self.rows[i][key] = tensor.select(dim, i).detach().clone()

    def _hook(self, name: str):
        def hook(module, args, kwargs, output):
            x = args[0] if args else kwargs.get("hidden_states")
            out = output[0] if isinstance(output, tuple) and not name.endswith("rotary_emb") else output
            if name.endswith("rotary_emb"):
                self._put("@cos", out[0], 1)
                self._put("@sin", out[1], 1)
                return
            if name.count(".") == 0 and name.startswith("L"):  # a decoder layer: its input and output
                self._put(f"{name}.in", x, 1)
                self._put(f"{name}.out", out, 1)
                return
            if name.endswith(("post_attention_layernorm", "down_proj")):
                self._put(f"{name}.in", x, 1)
            self._put(name, out, 1)
        return hook

    def _attention(self, module, query, key, value, attention_mask, **kwargs):
        out, weights = self.attention(module, query, key, value, attention_mask, **kwargs)
        layer = f"L{module.layer_idx}"
        n = query.shape[2]
        self._put(f"{layer}.attn.q", query, 2)
        self._put(f"{layer}.attn.out", out, 1)
        for i in range(n):
            end = self.start + i + 1  # the row's position + 1: the span it attends to
            self.rows[i][f"{layer}.attn.k_new"] = key[:, :, end - 1].clone()
            self.rows[i][f"{layer}.attn.k_span"] = key[:, :, :end].clone()
            self.rows[i][f"{layer}.attn.v_span"] = value[:, :, :end].clone()
        return out, weights

    def close(self) -> None:
        from transformers import AttentionInterface

        for handle in self.handles:
            handle.remove()
        AttentionInterface.register(self.name, self.attention)


def record(model, wrapper, ids: torch.Tensor, start: int) -> list[dict[str, torch.Tensor]]:
    """Row tensors of one pass of `ids` (n,) at position `start` through the wrapper (eager or static)."""
    recorder = Recorder(model, start)
    try:
        wrapper.forward(ids, last_only=False)
    finally:
        recorder.close()
    return recorder.rows


def op_table(layers: int):
    """Every op of the pass in order: (name, input keys, output key)."""
    ops = [("embedding", (), "model.embed_tokens"), ("rotary cos/sin", (), "@cos")]
    for layer in range(layers):
        local = lambda key: key if key.startswith("@") else f"L{layer}.{key}"  # noqa: E731
        ops.append((f"L{layer} residual stream in", (), f"L{layer}.in"))
        ops.extend((f"L{layer} {op}", tuple(local(k) for k in ins), local(out)) for op, ins, out in LAYER_OPS)
    ops += [("final norm", (f"L{layers - 1}.out",), "model.norm"), ("lm_head", ("model.norm",), "lm_head")]
    return ops


def compare(check: list[dict], alone: list[dict], ops) -> tuple[str | None, list[str]]:
    """(the first op whose output differs for some row, with the largest difference; ops that differ
    from equal inputs, with their rows)."""
    first, dependent = None, defaultdict(list)
    for name, ins, out in ops:
        for i, (c, a) in enumerate(zip(check, alone)):
            if out not in c or out not in a:
                continue
            if torch.equal(c[out], a[out]):
                continue
            diff = (c[out].float() - a[out].float()).abs().max().item()
            if first is None:
                first = f"{name} (row {i}, max |diff| {diff:.3g})"
            if ins and all(k in c and k in a and torch.equal(c[k], a[k]) for k in ins):
                dependent[name].append((i, diff))
    return first, [f"{n}: rows {[i for i, _ in rows]}, max |diff| {max(d for _, d in rows):.3g}" for n, rows in dependent.items()]


def wrappers(model, pair, runner: str, capacity: int):
    if runner == "eager":
        return CachedModel(model, pair.vocab_size, linear=linear_for(model))
    static = StaticModel(model, pair.vocab_size, linear=linear_for(model))
    static.reserve(capacity)
    return static


def diagnose(pair, model, ids: list[int], prefix: int, n: int, runner: str) -> tuple[str | None, list[str], float]:
    lm = wrappers(model, pair, runner, len(ids) + 8)
    lm.prefill(torch.tensor(ids[:prefix]))
    feed = torch.tensor(ids[prefix : prefix + n])
    check = record(model, lm, feed, prefix)
    lm.crop(prefix)
    alone = [record(model, lm, feed[i : i + 1], prefix + i)[0] for i in range(n)]
    first, dependent = compare(check, alone, op_table(model.config.num_hidden_layers))
    logits_diff = max((c["lm_head"].float() - a["lm_head"].float()).abs().max().item() for c, a in zip(check, alone))
    return first, dependent, logits_diff


def prompt_ids(pair, total: int) -> list[int]:
    text = (Path(__file__).resolve().parents[1] / "specdec" / "core" / "acceptance.py").read_text()
    ids = pair.tokenizer(text)["input_ids"]
    while len(ids) < total:
        ids = ids + ids
    return ids[:total]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default=None, help="a preset (default: the embedded pair)")
    parser.add_argument("--dtype", default=None, help="fp32 or bf16 (default: the machine's)")
    parser.add_argument("--kernel", default="w8a8")
    parser.add_argument("--prefix", type=int, default=200)
    parser.add_argument("--sizes", default="2,6,16")
    parser.add_argument("--runners", default="eager,static")
    parser.add_argument("--invariant", action="store_true",
                        help="make any kernel's model batch-invariant (row attention, fixed-order fp32 products), to see what else differs")
    parser.add_argument("--before", action="store_true",
                        help="undo what specdec/kernels/batch_invariant.py does (packed sdpa, BLAS products): the pass as it was")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    pair = load_pair(args.pair, dtype=args.dtype)
    model = kernel_target(pair, args.kernel)
    if args.invariant:
        make_batch_invariant(model)
    if args.before:
        model.set_attn_implementation(PACKED)
        setattr(model, MARK, False)
    sizes = [int(s) for s in args.sizes.split(",")]
    ids = prompt_ids(pair, args.prefix + max(sizes))
    print(f"{pair.name}, kernel {args.kernel}, {pair.dtype_name} glue, attention {model.config._attn_implementation}, prefix {args.prefix}, CPU {machine.cpu_model()} "
          f"({' '.join(machine.reported_flags())})")
    for runner in args.runners.split(","):
        for n in sizes:
            first, dependent, diff = diagnose(pair, model, ids, args.prefix, n, runner)
            logits = "bitwise equal" if diff == 0 else f"DIFFER (max |diff| {diff:.3g})"
            print(f"\n{runner}, check of {n}: logits {logits}; first op that differs: {first}")
            for line in dependent:
                print(f"  differs from equal inputs: {line}")


if __name__ == "__main__":
    with torch.inference_mode():
        main()
