"""Which products of each decoder layer the lean pass runs as one (specdec/kernels/joined.py says
why and why the bits stay the same): the query, key and value projections, or the query and key
ones where the value's runs on another kernel (the GGUF keeps `attn_v` in Q6_K in half the layers),
and the MLP's gate and up projections. A product layer class offers it with a classmethod
`joined(parts) -> layer or None`; others (nn.Linear, the weight-only kernels) run as they are.

The joined layers are registered as children of the attention and MLP modules (QKV, GATE_UP), so
what looks for a model's products finds them (specdec.measure.passcost.products) and the weights
are counted once (the parts hold views into them).
"""

from __future__ import annotations

from dataclasses import dataclass

QKV = "specdec_qkv"  # the attention module's child: its projections joined
GATE_UP = "specdec_gate_up"  # the MLP's child: gate and up joined
PLAN = "specdec_joined"  # the decoder's attribute: each layer's Joined, made once
WHOLE_VECTORS = 64  # the gate's columns must be a multiple of this (below)


@dataclass(frozen=True)
class Joined:
    """One layer's joined products: qkv gives the query's and the key's columns and, when `with_value`,
    the value's after them (None: three calls); gate_up gives `gate` columns, then the up projection's."""

    qkv: object | None
    query: int  # columns of the query projection's output
    key: int  # and of the key's
    with_value: bool
    gate_up: object | None
    gate: int


def plan(decoder) -> list[Joined]:
    """Each layer's Joined, joined at the first call (the parts' buffers become views: idempotent)."""
    made = decoder.__dict__.get(PLAN)
    if made is None:
        made = [_join_layer(layer) for layer in decoder.layers]
        decoder.__dict__[PLAN] = made  # a plain attribute: not a module, not in the state dict
    return made


def _join_layer(layer) -> Joined:
    attention, mlp = layer.self_attn, layer.mlp
    qkv = _joined([attention.q_proj, attention.k_proj, attention.v_proj])
    with_value = qkv is not None
    if qkv is None:
        qkv = _joined([attention.q_proj, attention.k_proj])
    # The activation runs on the gate's columns as a slice of the joined output. torch's elementwise
    # loops run whole vectors and then a scalar tail, and SiLU's vector and scalar code can round
    # differently; with the gate a multiple of 64 columns (two AVX-512 vectors of bf16) every element
    # takes the vector code, as it does on the gate alone.
    gate_up = _joined([mlp.gate_proj, mlp.up_proj]) if mlp.gate_proj.out_features % WHOLE_VECTORS == 0 else None
    if qkv is not None:
        setattr(attention, QKV, qkv)
    if gate_up is not None:
        setattr(mlp, GATE_UP, gate_up)
    return Joined(qkv, attention.q_proj.out_features, attention.k_proj.out_features, with_value, gate_up, mlp.gate_proj.out_features)


def _joined(parts: list):
    join = getattr(type(parts[0]), "joined", None)
    return join(parts) if join is not None else None
