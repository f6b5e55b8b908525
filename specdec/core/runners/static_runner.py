"""The static runner: one step in fixed shapes, acceptance on the device, one read to the host.

Per step, nothing goes from Python data to the device: the sequence is mirrored on the device
(`tokens`), so the last token and the draft's pending tokens are sliced from it, and what the step
accepted is copied into it on the device. Prompt lookup's ids, found on the host, go through one
pinned buffer without waiting. The step ends with one device-to-host copy of everything its event
needs (reading.pack); the draft and verify seconds come from the StepClock (CUDA events on a GPU).
The compiled runner is this one over captured models (runners/capture.py).
"""

from __future__ import annotations

import torch

from specdec.core.acceptance import greedy_accept, speculative_sample_race
from specdec.core.config import MAX_K
from specdec.core.runners.clock import StepClock
from specdec.core.runners.reading import Checked, pack, unpack
from specdec.core.runners.shapes import DRAFT_SHAPES, LARGEST, bucket, target_shapes
from specdec.core.runners.static_draft import StaticDrafter
from specdec.core.sampling import probs_from_logits


class HostIds:
    """Token ids found on the host (prompt lookup) on their way to the device: written into a
    pinned buffer through its numpy view (no torch call), copied without waiting."""

    def __init__(self, device: torch.device):
        cuda = device.type == "cuda"
        self.host = torch.zeros(MAX_K, dtype=torch.long, pin_memory=cuda)
        self.view = self.host.numpy()
        self.device = torch.zeros(MAX_K, dtype=torch.long, device=device) if cuda else self.host

    def send(self, ids: list[int]) -> torch.Tensor:
        """(n,) on the device. The buffer is rewritten by the next send; each step's read has waited
        for the copy by then."""
        n = len(ids)
        self.view[:n] = ids
        if self.device is not self.host:
            self.device[:n].copy_(self.host[:n], non_blocking=True)
        return self.device[:n]


class StaticRunner:
    """A run's tensor side on the static path (the Runner interface: prefill, check, keep, close)."""

    looks_on = False  # acceptance happens on the device: there is no verify hook to look on through

    def __init__(self, parts, config, generator: torch.Generator, verify=None):
        self.config, self.generator, self.device = config, generator, parts.device
        self.target, self.draft = parts.target, parts.draft  # StaticModel, StaticModel or None
        self.clock = StepClock(parts.device)
        self.host_ids = HostIds(parts.device)
        self.tokens: torch.Tensor | None = None  # (capacity,) the sequence, on the device
        self.capture_s = 0.0  # seconds this run spent capturing passes (compiled runner, first runs)
        self._step: tuple[torch.Tensor, torch.Tensor] | None = None  # the last check's drafts and token
        self.drafter: StaticDrafter | None = None  # made once the draft model is claimed

    def prefill(self, seq: list[int], room: int) -> None:
        """Claim the models for a run of the prompt and up to `room` new tokens (capturing their
        shapes if they are compiled and this is their first run), then feed the prompt but its
        last token to both."""
        positions = len(seq) + room
        self.target = self._claim(self.target, positions, target_shapes(self.config))
        if self.draft is not None:
            self.draft = self._claim(self.draft, positions, DRAFT_SHAPES)
            self.drafter = StaticDrafter(self.draft, self.config, self.generator)
        self.tokens = torch.zeros(positions + LARGEST, dtype=torch.long, device=self.device)
        self.tokens[: len(seq)] = torch.tensor(seq, device=self.device)  # the prompt: before the steps
        self.target.prefill(self.tokens[: len(seq) - 1])
        if self.draft is not None:
            self.draft.prefill(self.tokens[: len(seq) - 1])

    def check(self, seq: list[int], k: int, lookup: list[int]) -> Checked:
        """Draft up to k tokens, check them in one fixed-shape target pass, accept on the device,
        and read what the event needs in one transfer."""
        config, length = self.config, len(seq)
        self.clock.mark(0)
        ids, q, counted, source = self.propose(length, k, lookup)
        self.clock.mark(1)
        n = ids.shape[0]  # K: known on the host (lookup's count, or k)
        size = bucket(n + 1)
        feed = self.target.input(size)
        feed[:1].copy_(self.tokens[length - 1 : length])
        feed[1 : n + 1].copy_(ids)
        logits = self.target.run(size, n + 1, last_only=False)[: n + 1]  # (K+1, V)
        probs = probs_from_logits(logits, config.temperature, config.top_k, config.top_p)  # (K+1, V)
        if config.greedy:
            accepted, token = greedy_accept(ids, logits, counted)
        else:
            accepted, token = speculative_sample_race(ids, probs, q, self.generator, counted)
        head = [accepted, token] + ([counted] if counted is not None else [])
        packed = pack(head, ids, probs, q, logits)
        self.clock.mark(2)
        values = packed.tolist()  # the step's one read from the device
        self._step = (ids, token)
        return unpack(values, len(head), n, source, self.clock.seconds())

    def propose(self, length: int, k: int, lookup: list[int]):
        """(ids (K,), q (K, V) or None, drafts that count or None, who drafted)."""
        if lookup:
            return self.host_ids.send(lookup), None, None, "lookup"
        if k > 0 and self.draft is not None:
            ids, q, counted = self.drafter.propose(self.tokens, length, k)
            return ids, q, counted, "model"
        return torch.empty(0, dtype=torch.long, device=self.device), None, None, ""

    def keep(self, length_before: int, accepted: int, length: int) -> None:
        """Copy what the step kept into the device's sequence, on the device, and set both models'
        positions to it: the target holds the sequence but its last token, the draft at most the
        accepted drafts (it may hold one more than the eager runner's: it has fed every draft but
        the last, valid or not, and keeps those the target accepted)."""
        ids, token = self._step
        self.tokens[length_before : length_before + accepted].copy_(ids[:accepted])
        if length > length_before + accepted:
            self.tokens[length - 1 : length].copy_(token.view(1))
        self.target.crop(length - 1)
        if self.draft is not None:
            self.draft.crop(length_before + accepted)

    def close(self) -> None:
        """Give shared (compiled) models back."""
        self.target.release(self)
        if self.draft is not None:
            self.draft.release(self)

    def _claim(self, model, positions: int, shapes):
        """model.claim for this run, adding the seconds it spent capturing to capture_s."""
        before = sum(model.capture_s.values())
        claimed = model.claim(self, positions, shapes)
        self.capture_s += sum(model.capture_s.values()) - before
        return claimed
