"""The eager runner: transformers as it is, over growing caches (specdec.core.cached_model).

Shapes vary from step to step, and the host reads when it needs to: the draft's early stop reads
its top probability after each pass, a GPU run waits for the device between drafting and checking
(only so the two are timed apart), and sampling draws with torch.multinomial. The step panel's
recorded run (specdec.core.detail) runs here: it looks on through the loop's `verify` hook.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from specdec.core.drafters import Draft, ModelDrafter
from specdec.core.runners.reading import Checked, pack, unpack
from specdec.core.sampling import probs_from_logits

Verify = Callable[[Draft, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class EagerRunner:
    """A run's tensor side on the eager path (the Runner interface: prefill, check, keep, close)."""

    looks_on = True  # calls the loop's verify hook (the step panel's DetailedDecoding needs it)

    def __init__(self, parts, config, generator: torch.Generator, verify: Verify):
        self.config, self.device, self.verify = config, parts.device, verify
        self.target = parts.target  # CachedModel
        self.draft = parts.draft  # CachedModel or None
        self.model_drafter = ModelDrafter(parts.draft, config, generator) if parts.draft is not None else None
        self.capture_s = 0.0  # nothing is captured on this path

    def prefill(self, seq: list[int], room: int) -> None:
        """Feed the prompt but its last token to both models (room: unused, the caches grow)."""
        prefix = torch.tensor(seq[:-1], device=self.device)
        self.target.prefill(prefix)
        if self.model_drafter:
            self.model_drafter.prefill(prefix)

    def check(self, seq: list[int], k: int, lookup: list[int]) -> Checked:
        """Draft up to k tokens (lookup's ids when it found some), score them in one target pass,
        apply the acceptance rule, and read all the event needs to the host in one transfer."""
        config, device = self.config, self.device
        t0 = time.perf_counter()
        draft = self.propose(seq, k, lookup)
        if device.type == "cuda":
            torch.cuda.synchronize()  # only so draft and verify seconds are measured apart
        t1 = time.perf_counter()
        # One target pass over the last token and the K drafts scores K+1 positions.
        logits = self.target.forward(torch.cat([torch.tensor(seq[-1:], device=device), draft.ids]), last_only=False)  # (K+1, V)
        probs = probs_from_logits(logits, config.temperature, config.top_k, config.top_p)  # (K+1, V)
        n_accepted, next_token = self.verify(draft, logits, probs)
        values = pack([n_accepted, next_token], draft.ids, probs, draft.q, logits).tolist()  # the read of the step
        t2 = time.perf_counter()
        return unpack(values, 2, draft.ids.shape[0], draft.source, (t1 - t0, t2 - t1))

    def propose(self, seq: list[int], k: int, lookup: list[int]) -> Draft:
        """Prompt lookup's ids when it found some (free), else the draft model's, else nothing."""
        if lookup:
            return Draft(torch.tensor(lookup, device=self.device), None, "lookup")
        if k > 0 and self.model_drafter is not None:
            return self.model_drafter.propose(seq, k)
        return Draft(torch.empty(0, dtype=torch.long, device=self.device), None)

    def keep(self, length_before: int, accepted: int, length: int) -> None:
        """Roll both caches back to what the target accepted: the target holds the sequence but its
        last token, the draft at most the accepted drafts."""
        self.target.crop(length - 1)
        if self.model_drafter:
            self.model_drafter.sync(length_before + accepted)

    def close(self) -> None:
        pass
