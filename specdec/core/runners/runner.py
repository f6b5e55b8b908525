"""One step of speculative decoding, whatever runs the passes: the proposer drafts, the target
checks the K drafts in one pass, the rule accepts on the device, and one read brings the step to
the host.

Per step, nothing goes from Python data to the device: the sequence is mirrored on the device
(`tokens`), so the last token and the draft model's pending tokens are sliced from it, and what
the step kept is copied into it on the device. Prompt lookup's ids, found on the host, go through
one pinned buffer without waiting. The step ends with one device-to-host copy of everything its
event needs (`pack`); the draft and verify seconds come from the StepClock (CUDA events on a GPU).
The target (and a draft model) may be eager, static or compiled (specdec.core.runners): the step
is the same.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specdec.core.acceptance import greedy_accept, speculative_sample
from specdec.core.config import MAX_K
from specdec.core.proposers.base import Draft, Proposer, nothing
from specdec.core.runners.static_model import LARGEST, target_shapes
from specdec.core.sampling import probs_from_logits


@dataclass(frozen=True)
class Checked:
    """What one target pass decided, read to the host in the step's one transfer."""

    drafted: list[int]  # (K,) the drafted ids
    accepted: int  # drafts the rule kept
    token: int  # the target's own token after them (a correction, or the bonus when all K were kept)
    p_target: list[float]  # (K,) p of each drafted token under the target
    p_draft: list[float]  # (K,) q of each drafted token (1.0 where prompt lookup drafted)
    margins: list[float]  # (K+1,) the target's top-1 minus top-2 logit at each scored position
    drafter: str  # who drafted: a proposer's name, or "" (nothing)
    draft_s: float
    verify_s: float
    withdrawn_why: str = ""  # the drafter left out an unsure draft after these (Draft.withdrawn_why)


class Runner:
    """A run's tensor side: the target, its proposers, the acceptance rule, the step's one read."""

    details = None  # what a RecordingRunner records for the step panel; None: nothing is recorded

    def __init__(self, parts, config, generator: torch.Generator, proposers: list[Proposer]):
        self.config, self.generator, self.device = config, generator, parts.device
        self.lender, self.proposers = parts.target, proposers
        self.clock = StepClock(parts.device)
        self.host_ids = HostIds(parts.device)
        self.target = None  # the RunModel claimed for this run (prefill)
        self.tokens: torch.Tensor | None = None  # (capacity,) the sequence, on the device
        self.capture_s = 0.0  # seconds this run spent capturing passes (compiled runner, first runs)
        self._step: tuple[torch.Tensor, torch.Tensor] | None = None  # the last check's drafts and token

    def prefill(self, seq: list[int], room: int) -> None:
        """Claim the target for a run of the prompt and up to `room` new tokens, feed it the prompt
        but its last token, then start the proposers."""
        positions = len(seq) + room
        self.target = self.claim(self.lender, positions, target_shapes(self.config))
        self.tokens = torch.zeros(positions + LARGEST, dtype=torch.long, device=self.device)
        self.tokens[: len(seq)] = torch.tensor(seq, device=self.device)  # the prompt: before the steps
        self.target.prefill(self.tokens[: len(seq) - 1])
        for proposer in self.proposers:
            proposer.start(self, len(seq), positions)

    def check(self, seq: list[int], proposer: Proposer | None, k: int) -> Checked:
        """Draft up to k tokens with `proposer`, check them in one target pass, accept on the
        device, and read what the event needs in one transfer."""
        config, length = self.config, len(seq)
        self.clock.mark(0)
        draft = proposer.propose(self, seq, k) if proposer is not None and k > 0 else nothing(self.device)
        self.clock.mark(1)
        feed = torch.cat([self.tokens[length - 1 : length], draft.ids])  # (K+1,) the last token, then the drafts
        logits = self.target.forward(feed, last_only=False)  # (K+1, V)
        probs = probs_from_logits(logits, config.temperature, config.top_k, config.top_p)  # (K+1, V)
        accepted, token = self.accept(draft, logits, probs)
        head = [accepted, token] + ([draft.counted] if draft.counted is not None else [])
        packed = pack(head, draft.ids, probs, draft.q, logits)
        self.clock.mark(2)
        values = packed.tolist()  # the step's one read from the device
        self._step = (draft.ids, token)
        return unpack(values, len(head), draft.ids.shape[0], draft.drafter, self.clock.seconds(), draft.withdrawn_why)

    def accept(self, draft: Draft, logits: torch.Tensor, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The lossless rule: (drafts kept, the target's next token), 0-d device tensors. logits, probs: (K+1, V)."""
        if self.config.greedy:
            return greedy_accept(draft.ids, logits, draft.counted)
        return speculative_sample(draft.ids, probs, draft.q, self.generator, draft.counted)

    def keep(self, length_before: int, accepted: int, length: int) -> None:
        """The loop kept `accepted` drafts and the sequence is now `length` long: copy what it kept
        into the device's sequence, roll the target back to it (it holds the sequence but its last
        token), and let the proposers settle."""
        ids, token = self._step
        self.tokens[length_before : length_before + accepted].copy_(ids[:accepted])
        if length > length_before + accepted:
            self.tokens[length - 1 : length].copy_(token.view(1))
        self.target.crop(length - 1)
        for proposer in self.proposers:
            proposer.settle(self, length_before, accepted, length)

    def close(self) -> None:
        """Give back what the run claimed (a compiled model serves one run at a time)."""
        self.lender.release(self)
        for proposer in self.proposers:
            proposer.close(self)

    def claim(self, lender, positions: int, shapes):
        """lender.claim for this run, adding the seconds it spent capturing passes to capture_s."""
        before = sum(lender.capture_s.values())
        model = lender.claim(self, positions, shapes)
        self.capture_s += sum(lender.capture_s.values()) - before
        return model

    def send(self, ids: list[int]) -> torch.Tensor:
        """Token ids found on the host (prompt lookup) -> (n,) on the device, without waiting."""
        return self.host_ids.send(ids)


class HostIds:
    """Token ids found on the host on their way to the device: written into a pinned buffer
    through its numpy view (no torch call), copied without waiting."""

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


class StepClock:
    """mark(0) before drafting, mark(1) after, mark(2) after the check; seconds() once the step's
    read has come back. On a CPU the marks are the host's clock (the work is done when the call
    returns). On a GPU they are CUDA events recorded in the stream: the times are the device's, and
    reading them after the step's one transfer (which waited for the stream) waits for nothing more."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if self.cuda else None
        self.times = [0.0, 0.0, 0.0]

    def mark(self, i: int) -> None:
        if self.cuda:
            self.events[i].record()
        else:
            self.times[i] = time.perf_counter()

    def seconds(self) -> tuple[float, float]:
        """(draft seconds, verify seconds) of the marked step."""
        if self.cuda:
            return self.events[0].elapsed_time(self.events[1]) / 1000, self.events[1].elapsed_time(self.events[2]) / 1000
        return self.times[1] - self.times[0], self.times[2] - self.times[1]


def pack(head: list[torch.Tensor], ids: torch.Tensor, probs: torch.Tensor, q: torch.Tensor | None,
         logits: torch.Tensor) -> torch.Tensor:
    """One float64 tensor: head (0-d tensors: n_accepted, next_token, and the drafts that count
    when the draft stopped early), ids (K,), p and q of each draft (K,), margins (K+1,).
    probs, logits: (K+1, V) of the target; q: (K, V) of the draft, None for prompt lookup."""
    k = ids.shape[0]
    p_drafted = probs[:k].gather(1, ids[:, None]).squeeze(1)  # (K,)
    q_drafted = q.gather(1, ids[:, None]).squeeze(1) if q is not None else torch.ones(k, device=probs.device)
    top2 = logits.float().topk(2, dim=-1).values  # (K+1, 2)
    return torch.cat([torch.stack(head).double(), ids.double(), p_drafted.double(), q_drafted.double(),
                      (top2[:, 0] - top2[:, 1]).double()])


def unpack(values: list[float], heads: int, k: int, drafter: str, seconds: tuple[float, float],
           withdrawn_why: str = "") -> Checked:
    """The host's side of pack: values as read, `heads` head values, K drafts. A third head value
    (the drafts that count) cuts the drafts, their p and q to that many."""
    counted = int(values[2]) if heads > 2 else k
    body = values[heads:]
    return Checked(drafted=[int(t) for t in body[:counted]], accepted=int(values[0]), token=int(values[1]),
                   p_target=body[k : k + counted], p_draft=body[2 * k : 2 * k + counted], margins=body[3 * k :],
                   drafter=drafter, draft_s=seconds[0], verify_s=seconds[1], withdrawn_why=withdrawn_why)
