"""Where draft tokens come from: a small draft model, or prompt lookup (n-gram matches)."""

from __future__ import annotations

import torch

from specdec.core.cached_model import CachedModel
from specdec.core.sampling import probs_from_logits, sample


class Draft:
    """A proposal: ids (K,) on the device, and q (K, V) draft probabilities, or None when the
    proposal is deterministic (prompt lookup); `source` says who drafted it ("model", "lookup", "")."""

    def __init__(self, ids: torch.Tensor, q: torch.Tensor | None, source: str = ""):
        self.ids = ids
        self.q = q
        self.source = source


class ModelDrafter:
    """Drafts K tokens autoregressively with a small model that shares the target's tokenizer."""

    def __init__(self, lm: CachedModel, config, generator: torch.Generator | None):
        self.lm = lm  # the draft model with its own cache, built by whoever assembles the run
        self.config = config
        self.generator = generator

    def prefill(self, ids: torch.Tensor) -> None:
        self.lm.prefill(ids)

    def sync(self, valid: int) -> None:
        """Forget cached positions past `valid` (drafts the target rejected)."""
        self.lm.crop(min(valid, self.lm.length))

    def propose(self, seq: list[int], k: int) -> Draft:
        """seq: the whole sequence so far. Feeds the tokens the cache has not seen yet: one
        normally; two after a fully accepted draft (the last draft and the bonus token); more when
        prompt lookup drafted the steps before (drafter "auto")."""
        cfg = self.config
        pending = torch.tensor(seq[self.lm.length :], device=self.lm.device)  # (n,) n >= 1
        ids, qs = [], []
        for i in range(k):
            logits = self.lm.forward(pending, last_only=True)  # (1, V)
            q = probs_from_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # (1, V)
            token = logits.argmax(dim=-1) if cfg.greedy else sample(q, self.generator)  # (1,)
            ids.append(token)
            qs.append(q)
            # Stop early when the draft is unsure: its next tokens would likely be rejected.
            # The decision uses q (known before sampling), so the sampling rule stays exact.
            if cfg.draft_confidence > 0 and i < k - 1 and q.max().item() < cfg.draft_confidence:
                break
            if i < k - 1:
                pending = token
        return Draft(torch.cat(ids), torch.cat(qs), "model")


class LookupDrafter:
    """Prompt lookup: find the latest earlier occurrence of the sequence's last n tokens (n from
    max_ngram down to min_ngram) and propose what followed it. Costs no model pass; shines on edits."""

    def __init__(self, max_ngram: int, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min(min_ngram, max_ngram)  # shorter matches are not trusted

    def propose_ids(self, seq: list[int], k: int) -> list[int]:
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            tail = seq[-n:]
            # Scan right to left so the most recent match wins (it is the best local predictor).
            for start in range(len(seq) - n - 1, -1, -1):
                if seq[start : start + n] == tail:
                    follow = seq[start + n : start + n + k]
                    if follow:
                        return follow
        return []
