"""The draft model: a small model that shares the target's tokenizer drafts K tokens, one pass each.

It runs on whatever model its runner lends it (eager, static or compiled: specdec.core.runners),
fed from the device's copy of the sequence: the tokens it has not seen (one normally; two after a
fully accepted draft, the last draft and the bonus token; more after steps prompt lookup drafted),
then each token it drafts. Nothing goes from Python data to the device.

It reads the prompt just before its first draft (`ready`), not when the run starts: a run whose K
policy never has it draft (a cost policy that finds drafting does not pay here, or prompt lookup
drafting every step) then never pays for that pass, about two decode steps of a 56-token prompt on a
CPU. Like the target's reading of the prompt, it is prompt processing: outside the run's clock, so
its steps' draft times stay those of drafting. The K policy prices a step's catch-up from the tokens
after the prompt, as before, so the choices, and the text, are the same either way.

The early stop (GenerationConfig.draft_confidence: stop once the draft's top probability falls
below it) depends on where the tensors live:
- on a CPU (FREE_READS) the "device" is host memory: reading the top probability waits for
  nothing, so the draft stops there and makes no pass it does not need;
- on a GPU, without a read per pass: the draft runs all K passes, and where it would have stopped
  is computed on the device as the number of drafts that count (Draft.counted). The check then
  ignores the drafts past it (they count as not drafted) and the host cuts them from what it
  reads. What it costs is the draft passes after the stop, which a read per pass would save at
  the price of a wait for the device per pass.
Both give the same events. The stop is decided from q, known before sampling, so sampling stays exact.
"""

from __future__ import annotations

import torch

from specdec.core.acceptance import race_sample
from specdec.core.proposers.base import Draft
from specdec.core.runners.static_model import DRAFT_SHAPES
from specdec.core.sampling import probs_from_logits

FREE_READS = ("cpu",)  # devices whose tensors are in host memory: reading one waits for nothing


class ModelProposer:
    name = "model"

    def __init__(self, lender, config, generator: torch.Generator | None):
        self.lender, self.config, self.generator = lender, config, generator  # lender: the draft model as its runner runs it
        self.lm = None  # the RunModel claimed for the run
        self.prompt_length = 0  # the prompt it reads before its first draft (all but its last token)
        self.prompt_read = False  # whether it has read the prompt (ready)
        self.drafted_at = -1  # the sequence's length when it last drafted
        self.caught_up = 0  # the sequence's length after the last step it drafted (the prompt's, at the start)

    def has_draft(self, seq: list[int]) -> bool:
        return True

    def unseen(self, seq: list[int]) -> int:
        """The tokens its next first pass feeds: 1 after a step it drafted, plus every token of the
        steps it did not draft since (plain and lookup steps). Counted from the steps, not from its
        cache: a draft that ran on past its early stop on the device (`counted`) has read one token
        more than one stopped on the host, and both must price the same. (A fully kept draft leaves
        its last draft unread, one token more, as it always did; a 2-token pass costs about one.)"""
        return len(seq) - self.caught_up + 1

    def start(self, run, prompt_length: int, positions: int) -> None:
        self.lm = run.claim(self.lender, positions, DRAFT_SHAPES)  # the prompt is read at the first draft
        self.prompt_length, self.drafted_at, self.caught_up = prompt_length, -1, prompt_length
        self.prompt_read = False

    def ready(self, run) -> None:
        if not self.prompt_read:  # its first draft of the run: the prompt first, as the target read it
            self.lm.prefill(run.tokens[: self.prompt_length - 1])  # a model lent again (compiled) starts over at 0
            self.prompt_read = True

    def propose(self, run, seq: list[int], k: int) -> Draft:
        self.ready(run)  # a no-op where the loop made it ready (outside its clock)
        cfg, lm = self.config, self.lm
        self.drafted_at = len(seq)
        stop_on_host = cfg.draft_confidence > 0 and lm.device.type in FREE_READS
        logits = lm.forward(run.tokens[lm.length : len(seq)], last_only=True)  # (1, V) after the tokens it had not seen
        ids, qs, tops = [], [], []
        for i in range(k):
            q = probs_from_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)  # (1, V)
            token = logits.argmax(dim=-1) if cfg.greedy else race_sample(q, self.generator)  # (1,)
            ids.append(token)
            qs.append(q)
            if i == k - 1 or stop_on_host and q.max().item() < cfg.draft_confidence:
                break
            tops.append(q.amax(dim=-1))
            logits = lm.forward(token, last_only=True)
        counted = None
        if cfg.draft_confidence > 0 and not stop_on_host and k > 1:
            counted = confident_prefix(torch.cat(tops), cfg.draft_confidence)
        return Draft(torch.cat(ids), torch.cat(qs), self.name, counted)

    def settle(self, run, kept_from: int, accepted: int, length: int) -> None:
        """Forget the drafts the target turned down. The draft has fed every draft but the last;
        after a full accept it keeps them all and feeds the last one with the bonus token next time."""
        self.lm.crop(min(kept_from + accepted, self.lm.length))
        if kept_from == self.drafted_at:  # a step it drafted
            self.caught_up = length

    def close(self, run) -> None:
        self.lender.release(run)


def confident_prefix(tops: torch.Tensor, threshold: float) -> torch.Tensor:
    """tops: (K-1,) the draft's top probability at each drafted position but the last -> how many
    drafts count (0-d): the drafter stops after the first draft short of the last whose top
    probability is below the threshold: 1 + the number of confident positions before it."""
    confident = (tops >= threshold).int()  # (K-1,)
    return confident.cumprod(dim=0).sum() + 1
