"""The draft model's K tokens in fixed shapes, with nothing read from a GPU.

The tokens the draft has not seen come from the device's copy of the sequence (one normally; two
after a fully accepted draft: the catch-up pass; more after steps prompt lookup drafted, fed in
the fixed shapes like a short prompt). Each drafted token is written on the device into the next
one-token pass's ids buffer.

The early stop (GenerationConfig.draft_confidence) depends on where the tensors live:
- on a GPU, without a read per pass: the draft runs all K passes, and where it would have stopped
  (after the first token, short of the last, whose top probability fell below the threshold) is
  computed on the device as the number of drafts that count. The check then ignores the drafts
  past it (they count as not drafted) and the host cuts them from what it reads. What it costs is
  the draft passes after the stop, which a read per pass would save at the price of a wait for
  the device per pass;
- on a CPU (FREE_READS) the "device" is host memory: reading the top probability waits for
  nothing, so the draft stops where the eager runner stops and makes no pass it does not need
  (the passes after the stop cost `best` 8% on the bench prompts here: docs/benchmarks.md, "Runners").
Both give the eager runner's events.
"""

from __future__ import annotations

import torch

from specdec.core.acceptance import race_sample
from specdec.core.runners.static_model import StaticModel
from specdec.core.sampling import probs_from_logits

FREE_READS = ("cpu",)  # devices whose tensors are in host memory: reading one waits for nothing


class StaticDrafter:
    """Drafts K tokens with the draft model run static (or compiled)."""

    def __init__(self, lm: StaticModel, config, generator: torch.Generator | None):
        self.lm, self.config, self.generator = lm, config, generator
        self.stop_on_host = config.draft_confidence > 0 and lm.device.type in FREE_READS  # else decided on the device

    def propose(self, tokens: torch.Tensor, length: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """tokens: (capacity,) the sequence on the device, of which `length` are real; k >= 1.
        Returns ids (K,), q (K, V) and, when the early stop is decided on the device, the drafts
        that count (0-d); else None (every draft counts: K is k, or fewer where the host stopped)."""
        cfg, lm = self.config, self.lm
        logits = self.catch_up(tokens, length)  # (1, V)
        ids, qs, tops = [], [], []
        for i in range(k):
            q = probs_from_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # (1, V)
            token = logits.argmax(dim=-1) if cfg.greedy else race_sample(q, self.generator)  # (1,)
            ids.append(token)
            qs.append(q)
            if i == k - 1 or self.stop_on_host and q.max().item() < cfg.draft_confidence:
                break  # the eager drafter's stop, read where reading is free; decided from q, so sampling stays exact
            tops.append(q.amax(dim=-1))
            lm.input(1).copy_(token)
            logits = lm.run(1, 1, last_only=True)
        on_device = cfg.draft_confidence > 0 and not self.stop_on_host and k > 1
        counted = confident_prefix(torch.cat(tops), cfg.draft_confidence) if on_device else None
        return torch.cat(ids), torch.cat(qs), counted

    def catch_up(self, tokens: torch.Tensor, length: int) -> torch.Tensor:
        """Feed the tokens the draft has not seen -> the logits after the last (1, V)."""
        lm = self.lm
        pending = length - lm.position
        if pending <= 2:  # the fixed shapes: one token, or the last draft and the bonus token
            lm.input(pending).copy_(tokens[lm.position : length])
            return lm.run(pending, pending, last_only=True)
        return lm.forward(tokens[lm.position : length], last_only=True)


def confident_prefix(tops: torch.Tensor, threshold: float) -> torch.Tensor:
    """tops: (K-1,) the draft's top probability at each drafted position but the last -> how many
    drafts count (0-d): the eager drafter stops after the first draft short of the last whose top
    probability is below the threshold: 1 + the number of confident positions before it."""
    confident = (tops >= threshold).int()  # (K-1,)
    return confident.cumprod(dim=0).sum() + 1
