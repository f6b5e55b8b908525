"""What a pair has built from its models, kept for later runs: one typed slot per kind of thing.

Building a draft variant or a target kernel takes seconds to minutes, so each is built once per pair
and kept here; the functions that build them (specdec.kernels.variants, specdec.kernels.target_kernels,
specdec.kernels.head_offer, specdec.engines.assemble) look here first. The store itself builds nothing.

Only the models move with the pair (`modules`, specdec.serving.startup.place); a built head holds its
weights on the device it was built for, so it is built again after a move (`forget_heads`).
Measured costs are not kept here: they live in the cost table (specdec.measure.cost_table).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from specdec.core.proposers.head import HeadSource
    from specdec.kernels.head_offer import HeadOffer
    from specdec.kernels.variant_store import SubsetHead


@dataclass
class Built:
    drafts: dict[str, nn.Module] = field(default_factory=dict)  # draft variant -> the draft as that variant (the stock one is pair.draft)
    kernels: dict[str, nn.Module] = field(default_factory=dict)  # target kernel -> the target it runs (bf16 is pair.target)
    lossy: dict[str, nn.Module] = field(default_factory=dict)  # int8 / int4 -> the quantized target of the lossy lane
    heads: dict[tuple[str, str, str], HeadSource] = field(default_factory=dict)  # (head file, its digest, head kernel) -> the head
    vocab_heads: dict[tuple[str, int], SubsetHead] = field(default_factory=dict)  # (kernel, tokens) -> the target's lm_head on them
    head_target: dict | None = None  # what a head must have been trained for (head_offer.target_key): hashed once per pair
    head_offer: tuple[tuple, HeadOffer] | None = None  # (the head files' stamp when looked at, what was found there)

    def modules(self) -> list[nn.Module]:
        """Every built model: what moves with the pair."""
        return [*self.drafts.values(), *self.kernels.values(), *self.lossy.values(), *self.vocab_heads.values()]

    def forget_heads(self) -> None:
        """Drop the built heads (their weights stay where they were built): the next run builds them again."""
        self.heads.clear()
