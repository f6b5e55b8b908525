"""Several product layers that read the same input, as one layer of their kind: the int8-activation
kernels (W8A8Linear, W4A8Linear) offer it as `joined(parts)`, and the eager runner's lean pass
(specdec/core/runners/joined_products.py) runs a layer's query, key and value projections, and its
MLP's gate and up projections, through one call each.

Why: each call of these kernels costs about 10 to 15 us before its first weight is read (the op's
entry, the activation's quantization, waking the threads), and the query, key and value projections
are three calls of which two stream only 0.2 to 0.4 MB. Joined, the pass makes 4 calls a layer
instead of 7 and streams the weights without a break: 0.96 to 0.99 of the time of a pass of the `w4a8`
and `w8a8` targets (docs/benchmarks.md).

The same bits: each output channel of these kernels is computed from its own weights and the row's
activations alone (the activations are quantized per row, the sums are per channel, and the epilogue
is per channel), so a channel gives the same value wherever its tile sits. Parts are joined along
their tiles of output channels, so every part but the last must fill whole tiles.

The joined layer holds the weights once: each part's buffers become views into the joined layer's,
so the parts still run alone (transformers' path, `python -m specdec check`) on the same memory.
"""

from __future__ import annotations

import torch
from torch import nn


def joinable(parts: list[nn.Module], tile: int) -> bool:
    """Whether `parts` can run as one layer: two or more of one class, on one instruction-set path,
    over the same input columns, all with a bias or none, every part but the last whole tiles."""
    first = parts[0]
    return (len(parts) > 1 and all(type(p) is type(first) for p in parts)
            and all(p.path == first.path and p.in_features == first.in_features for p in parts)
            and len({p.bias is None for p in parts}) == 1
            and all(p.out_features % tile == 0 for p in parts[:-1]))


def join(parts: list[nn.Module], buffers: tuple[str, ...]) -> nn.Module:
    """A layer of the parts' class whose output is theirs side by side (out_features their sum): each
    of `buffers` (output channels or their tiles along dim 0, or None in every part) concatenated,
    and each part's made a view into it."""
    kind = type(parts[0])
    layer = kind.__new__(kind)  # no constructor: it would pack weights the parts have packed already
    nn.Module.__init__(layer)
    layer.in_features, layer.path = parts[0].in_features, parts[0].path
    layer.out_features = sum(p.out_features for p in parts)
    for name in buffers:
        pieces = [getattr(p, name) for p in parts]
        if pieces[0] is None:
            layer.register_buffer(name, None)
            continue
        whole = torch.cat(pieces)
        layer.register_buffer(name, whole)
        start = 0
        for part, piece in zip(parts, pieces):
            setattr(part, name, whole[start : start + piece.shape[0]])  # a view: contiguous, the same values
            start += piece.shape[0]
    return layer
