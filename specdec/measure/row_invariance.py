"""Which ops of a target pass give a row other bits when other rows share the pass (`python -m specdec check`).

After a cached prefix, a check of n rows is fed in one pass, then the same rows one token at a time
(each a one-token pass, as plain decoding runs them), on a runner's cache (eager: DynamicCache, no
mask for a one-token pass, transformers' own layers, whose calls the hooks see: the eager runner's
lean pass gives their bits, tests/test_lean_pass.py; static: a preallocated cache, a mask over its
capacity, fixed shapes).
Every op of every layer is recorded for each row: the embedding, the norms, the linear layers,
rotary, the attention over the cache, the MLP's product, the residual adds, the head. An op whose
inputs are the same bits in both passes and whose output is not depends on how many rows share the
pass: it is not row-invariant. An op whose inputs already differ cannot be judged (it inherits an
earlier op's difference). specdec/kernels/batch_invariant.py says why this matters and which
kernels it makes invariant.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

# The ops of one decoder layer in the order they run: (op, its inputs, its output), each a recorded
# tensor of the row (keys relative to the layer; "in" is the layer's input, "@" marks a shared key).
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
HOOKED = ("input_layernorm", "post_attention_layernorm", "_proj", "act_fn", "embed_tokens", "rotary_emb", "model.norm", "lm_head")


@dataclass
class OpResult:
    """One op (over all layers) in one check: how many of its rows could be judged, and those that differed."""

    judged: int = 0  # (layer, row) pairs whose inputs were the same bits alone and in the check
    differed: list[tuple[str, int, float]] = field(default_factory=list)  # (layer, row, max |diff|) of those


@dataclass
class CheckResult:
    runner: str
    rows: int  # n, the check's size
    logits_diff: float  # largest |difference| of any row's logits, check against alone
    first: str | None  # the first op whose output differs for some row, with where
    ops: dict[str, OpResult]  # by op name, in the order the pass runs them


class Recorder:
    """Hooks on the model's modules and its attention function; `rows[i][key]` is row i's tensor."""

    def __init__(self, model, start: int):
        from transformers import AttentionInterface

        self.start = start  # the position of the pass's first row
        self.rows: list[dict[str, torch.Tensor]] = []
        self.handles = []
        for name, module in model.named_modules():
            short = name.replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "")
            if name.endswith(HOOKED) or (short.startswith("L") and "." not in short):
                self.handles.append(module.register_forward_hook(self._hook(short), with_kwargs=True))
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
            if name.endswith("rotary_emb"):  # (cos, sin), each (B, n, D)
                self._put("@cos", output[0], 1)
                self._put("@sin", output[1], 1)
                return
            out = output[0] if isinstance(output, tuple) else output  # (B, n, ...)
            if name.startswith("L") and "." not in name:  # a decoder layer: its input and output
                self._put(f"{name}.in", x, 1)
                self._put(f"{name}.out", out, 1)
                return
            if name.endswith(("post_attention_layernorm", "down_proj")):
                self._put(f"{name}.in", x, 1)
            self._put(name, out, 1)
        return hook

    def _attention(self, module, query, key, value, attention_mask, **kwargs):
        out, weights = self.attention(module, query, key, value, attention_mask, **kwargs)  # query (B, H, n, D); out (B, n, H, D)
        layer = f"L{module.layer_idx}"
        self._put(f"{layer}.attn.q", query, 2)
        self._put(f"{layer}.attn.out", out, 1)
        for i in range(query.shape[2]):
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


def record(model, lm, ids: torch.Tensor, start: int) -> list[dict[str, torch.Tensor]]:
    """Row tensors of one pass of `ids` (n,) at position `start` through the runner's model `lm`."""
    recorder = Recorder(model, start)
    try:
        lm.forward(ids, last_only=False)
    finally:
        recorder.close()
    return recorder.rows


def op_table(layers: int) -> list[tuple[str, str, tuple[str, ...], str]]:
    """Every op of the pass in order: (op name, layer, input keys, output key)."""
    ops = [("embedding", "", (), "model.embed_tokens"), ("rotary cos/sin", "", (), "@cos")]
    for layer in range(layers):
        local = lambda key: key if key.startswith("@") else f"L{layer}.{key}"  # noqa: E731
        ops.extend((op, f"L{layer}", tuple(local(k) for k in ins), local(out)) for op, ins, out in LAYER_OPS)
    return ops + [("final norm", "", (f"L{layers - 1}.out",), "model.norm"), ("lm_head", "", ("model.norm",), "lm_head")]


def compare(check: list[dict], alone: list[dict], ops) -> tuple[str | None, dict[str, OpResult]]:
    """(the first op whose output differs for some row, with where; each op's verdict over its layers and rows)."""
    first, results = None, {}
    for name, layer, ins, out in ops:
        result = results.setdefault(name, OpResult())
        for i, (c, a) in enumerate(zip(check, alone)):
            if out not in c or out not in a:
                continue
            same_out = torch.equal(c[out], a[out])
            diff = 0.0 if same_out else (c[out].float() - a[out].float()).abs().max().item()
            if first is None and not same_out:
                first = f"{name} {layer} (row {i}, max abs diff {diff:.3g})".replace("  ", " ")
            if all(k in c and k in a and torch.equal(c[k], a[k]) for k in ins):
                result.judged += 1
                if not same_out:
                    result.differed.append((layer, i, diff))
    return first, results


def runner_lm(runner: str, model, vocab_size: int, capacity: int):
    from specdec.core.runners.eager_model import CachedModel
    from specdec.core.runners.static_model import StaticModel
    from specdec.kernels.cpu_linear import linear_for

    if runner == "eager":
        return CachedModel(model, vocab_size, linear=linear_for(model), lean=False)  # the layers' calls, hooked
    static = StaticModel(model, vocab_size, linear=linear_for(model))
    static.reserve(capacity)
    return static


def check_rows(model, vocab_size: int, ids: list[int], prefix: int, n: int, runner: str) -> CheckResult:
    """A check of ids[prefix : prefix + n] against the same rows one at a time, after `prefix` cached positions."""
    lm = runner_lm(runner, model, vocab_size, len(ids) + 8)
    lm.prefill(torch.tensor(ids[:prefix]))
    feed = torch.tensor(ids[prefix : prefix + n])
    check = record(model, lm, feed, prefix)
    lm.crop(prefix)
    alone = [record(model, lm, feed[i : i + 1], prefix + i)[0] for i in range(n)]
    first, ops = compare(check, alone, op_table(model.config.num_hidden_layers))
    logits_diff = max((c["lm_head"].float() - a["lm_head"].float()).abs().max().item() for c, a in zip(check, alone))
    return CheckResult(runner, n, logits_diff, first, ops)


def code_ids(tokenizer, total: int) -> list[int]:
    """`total` token ids of real code (this project's acceptance module, repeated as needed)."""
    text = (Path(__file__).resolve().parents[1] / "core" / "acceptance.py").read_text()
    ids = tokenizer(text)["input_ids"]
    while len(ids) < total:
        ids = ids + ids
    return ids[:total]


@contextmanager
def as_loaded(model, lms=()):
    """The model with batch invariance undone while inside (torch's packed sdpa, fp32 products on
    BLAS): the pass as it runs without specdec/kernels/batch_invariant.py. `lms`: runner models
    over it (eager or static), whose F.linear rerouting follows. Restored on leaving."""
    from specdec.kernels.attention import set_attention
    from specdec.kernels.batch_invariant import MARK
    from specdec.kernels.cpu_linear import linear_for

    kept = (model.config._attn_implementation, getattr(model, MARK, False), [lm.linear for lm in lms])
    set_attention(model, invariant=False)  # the device's own path (packed sdpa on a CPU)
    setattr(model, MARK, False)
    for lm in lms:
        lm.linear = linear_for(model)
    try:
        yield model
    finally:
        model.set_attn_implementation(kept[0])
        setattr(model, MARK, kept[1])
        for lm, linear in zip(lms, kept[2]):
            lm.linear = linear
