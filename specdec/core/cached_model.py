"""A causal LM with its own KV cache that can be extended and rolled back."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from transformers import DynamicCache


class CachedModel:
    """The model, its cache, and how its passes run (see __init__): ready for a run."""

    def __init__(self, model, vocab_size: int, linear: Callable[[], contextlib.AbstractContextManager] | None = None):
        self.model = model
        self.vocab_size = vocab_size  # models of one family may pad their embeddings differently
        self.device = model.device
        self.cache = DynamicCache(config=model.config)
        # Entered around every pass: a torch function mode that reroutes F.linear (the builder's
        # choice, e.g. specdec.kernels.cpu_linear.linear_for), or None to run the model as it is.
        self.linear = linear

    @property
    def length(self) -> int:
        """Positions held in the cache."""
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """ids: (n,) tokens after the cached positions -> logits (n, V), or (1, V) if last_only.
        Asking only for the last position's logits skips most of the vocabulary projection."""
        with self.linear() if self.linear else contextlib.nullcontext():
            out = self.model(
                input_ids=ids[None],
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1 if last_only else 0,
            )
        return out.logits[0, :, : self.vocab_size]

    def prefill(self, ids: torch.Tensor) -> None:
        if ids.numel():
            self.forward(ids, last_only=True)

    def claim(self, owner, positions: int, shapes=()) -> "CachedModel":
        """This model for a run (the runners' common interface: a static model reserves its cache
        here, a compiled one captures its shapes); a growing cache needs nothing."""
        return self

    def release(self, owner) -> None:
        pass

    def crop(self, length: int) -> None:
        """Keep the first `length` positions. (transformers >= 5.24 takes only a negative count:
        crop(-n) drops the last n positions.)"""
        if length < self.length:
            self.cache.crop(length - self.length)
