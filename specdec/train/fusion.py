"""EAGLE-3's fused features: the head reads the target's rows after a low, a middle and its last
layer, fused into one row (3H -> H), in place of the last layer's alone.

Where a real pair (f_t, token t+1) enters the head, f_t becomes

    g_t = fc([norm_low(low_t) ; norm_mid(mid_t) ; norm_last(f_t)])     (3H -> H)

and the head goes on as before; its draft steps after the first still read its own predicted
feature, in the last layer's space. fc starts as [0 ; 0 ; I], so g_t starts as the normalised f_t
and a fused head starts as the unfused one (at any initialisation of the rest): what fusion adds is
learnt. It is an ablation so far (Recipe.fusion, docs/benchmarks.md): the runners do not hand the
low and middle layers' rows to a drafting head, so `head train` does not offer it.
"""

from __future__ import annotations

import torch
from torch import nn

from specdec.core.head import RMSNorm


class Fusion(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.low_norm, self.mid_norm, self.last_norm = RMSNorm(hidden, eps), RMSNorm(hidden, eps), RMSNorm(hidden, eps)
        self.fc = nn.Linear(3 * hidden, hidden, bias=False)
        with torch.no_grad():
            self.fc.weight.zero_()
            self.fc.weight[:, 2 * hidden :].copy_(torch.eye(hidden))

    def forward(self, features: torch.Tensor, layers: torch.Tensor) -> torch.Tensor:
        """features (..., H): the last layer's rows (after the final norm); layers (..., 2, H): the low
        and middle layers' -> (..., H) the rows the head reads for its real pairs."""
        low, mid = layers[..., 0, :].to(features.dtype), layers[..., 1, :].to(features.dtype)
        return self.fc(torch.cat([self.low_norm(low), self.mid_norm(mid), self.last_norm(features)], dim=-1))
