"""The speculative decoding loop: draft -> verify -> accept -> roll back caches, one event per step.

Cache invariant: after every step the target's cache holds exactly the sequence minus its last
token (that token is fed at the start of the next target pass, followed by the new drafts); the
draft model's cache holds the same, or one position less after a fully accepted draft (its last
draft token and the bonus token are fed together at the start of the next draft).
Plain decoding is this same loop with nothing drafted: one token per target pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import torch

from .acceptance import greedy_accept, speculative_sample
from .cached_model import CachedModel
from .config import GenerationConfig
from .drafters import Draft, LookupDrafter, ModelDrafter
from .events import BONUS, CORRECTION, EOS_ACCEPTED, FINISH_EOS, FINISH_LENGTH, PLAIN, StepEvent
from .models import ModelPair
from .sampling import probs_from_logits
from .target_kernels import kernel_target
from .text import TextTracker
from .variants import draft_model


def generate(
    pair: ModelPair,
    prompt: str,
    config: GenerationConfig,
    *,
    chat: bool | None = None,
    stop: threading.Event | None = None,
    detail: bool = False,
) -> "Decoding":
    """Validate the input, then stream one StepEvent per target forward pass. With `detail`, the
    run also records what the step panel shows (specdec.detail); the events are the same."""
    config.validate()
    prompt_ids = pair.encode_prompt(prompt, chat=pair.chat if chat is None else chat, max_new_tokens=config.max_new_tokens)
    if config.drafter in ("model", "auto") and pair.draft is None:
        raise ValueError(f"drafter 'model' needs a draft model, and pair {pair.name!r} has none")
    if detail:
        from .detail import DetailedDecoding  # it subclasses Decoding

        return DetailedDecoding(pair, prompt_ids, config, stop)
    return Decoding(pair, prompt_ids, config, stop)


class DraftLength:
    """The K policy: fixed, or adaptive (+2 after a fully accepted draft, -1 otherwise).

    With pause_unprofitable it also stops drafting where drafting does not pay at the measured
    costs: when the last WINDOW drafting steps made fewer tokens per second than plain steps
    (one token per target pass) would have, the next PAUSE steps draft nothing (their events say
    `paused`); then it tries again from K = 1. Plain steps measure the one-token pass; until one
    has run, a drafting step's own target pass stands in for it (which favours drafting)."""

    WINDOW = 6  # drafting steps judged together
    PAUSE = 8  # plain steps before drafting is tried again

    def __init__(self, config: GenerationConfig):
        self.k = config.k
        self.adaptive = config.adaptive_k
        self.k_max = max(config.k, config.k_max)
        self.pause_unprofitable = config.pause_unprofitable
        self.paused = 0  # plain steps left in the current pause
        self.recent: list[tuple[int, float]] = []  # (tokens emitted, seconds) of recent drafting steps
        self.plain_pass_s: float | None = None  # latest one-token target pass

    def next_k(self) -> int:
        return 0 if self.paused else self.k

    def update(self, drafted: int, accepted: int, draft_s: float = 0.0, verify_s: float = 0.0) -> None:
        if self.paused:
            self.paused -= 1
            self.plain_pass_s = verify_s
            if not self.paused:
                self.k = 1
            return
        if self.adaptive and drafted:
            self.k = min(self.k_max, self.k + 2) if accepted == drafted else max(1, self.k - 1)
        if not (self.pause_unprofitable and drafted):
            return
        self.recent = [*self.recent, (accepted + 1, draft_s + verify_s)][-self.WINDOW :]
        tokens, seconds = sum(t for t, _ in self.recent), sum(s for _, s in self.recent)
        plain_rate = 1 / (self.plain_pass_s or verify_s)
        if len(self.recent) == self.WINDOW and tokens / seconds < plain_rate:
            self.paused, self.recent = self.PAUSE, []


class Decoding:
    """One generation run; iterate it for the StepEvents. Its caches are open to inspection
    (the tests check the rollback after every step)."""

    def __init__(self, pair: ModelPair, prompt_ids: list[int], config: GenerationConfig, stop=None):
        self.pair, self.config, self.stop = pair, config, stop
        self.generator = torch.Generator(device=pair.device).manual_seed(config.seed)  # seeded once per run
        self.target = CachedModel(kernel_target(pair, config.target_kernel), pair.vocab_size)  # built once per pair and kernel
        uses_model = config.drafter in ("model", "auto")
        draft = draft_model(pair, config.draft_variant) if uses_model else None  # built once per pair and variant
        self.model_drafter = ModelDrafter(draft, pair.vocab_size, config, self.generator) if uses_model else None
        # With the draft model behind it ("auto"), lookup must match at least 2 tokens: a lone
        # 1-token match guesses worse than the draft model (on the bench prompts, acceptance 0.47
        # against 0.58, and 1.31x against 1.51x over plain; docs/benchmarks.md).
        min_ngram = 2 if config.drafter == "auto" else 1
        self.lookup = LookupDrafter(config.lookup_ngram, min_ngram) if config.drafter in ("lookup", "auto") else None
        self.seq = list(prompt_ids)  # prompt + emitted tokens

    def __iter__(self) -> Iterator[StepEvent]:
        pair, config, stop = self.pair, self.config, self.stop
        target, model_drafter, lookup, seq = self.target, self.model_drafter, self.lookup, self.seq
        device = pair.device
        draft_length = DraftLength(config)
        text = TextTracker(pair.tokenizer, seq)

        prefix = torch.tensor(seq[:-1], device=device)
        target.prefill(prefix)
        if model_drafter:
            model_drafter.prefill(prefix)

        start = time.perf_counter()
        held_s = 0.0  # time the consumer held the run between events (drawing a page, waiting for "Step")
        total = 0
        for step in range(config.max_new_tokens):
            if stop is not None and stop.is_set():
                return
            # Leave room for the target's own token so a step never overshoots max_new_tokens.
            k = 0 if config.drafter == "none" else min(draft_length.next_k(), config.max_new_tokens - total - 1)

            t0 = time.perf_counter()
            draft = propose(seq, k, lookup, model_drafter, device)
            if device.type == "cuda":
                torch.cuda.synchronize()  # only so draft and verify seconds are measured apart
            t1 = time.perf_counter()

            # One target pass over the last token and the K drafts scores K+1 positions.
            logits = target.forward(torch.cat([torch.tensor(seq[-1:], device=device), draft.ids]), last_only=False)  # (K+1, V)
            probs = probs_from_logits(logits, config.temperature, config.top_k, config.top_p)  # (K+1, V)
            n_accepted, next_token = self.verify(draft, logits, probs)
            n_drafted = draft.ids.shape[0]
            rows = torch.arange(n_drafted, device=device)
            p_drafted = probs[rows, draft.ids]  # (K,)
            q_drafted = draft.q[rows, draft.ids] if draft.q is not None else torch.ones(n_drafted, device=device)
            top2 = logits.float().topk(2, dim=-1).values  # (K+1, 2)
            # The one host sync of a step: everything the event needs, in one transfer.
            fetched = torch.cat([
                torch.stack([n_accepted, next_token]).double(), draft.ids.double(),
                p_drafted.double(), q_drafted.double(), (top2[:, 0] - top2[:, 1]).double(),
            ]).tolist()
            t2 = time.perf_counter()

            n, token = int(fetched[0]), int(fetched[1])
            drafted = [int(t) for t in fetched[2 : 2 + n_drafted]]
            p_target = fetched[2 + n_drafted : 2 + 2 * n_drafted]
            p_draft = fetched[2 + 2 * n_drafted : 2 + 3 * n_drafted]
            margins = fetched[2 + 3 * n_drafted :]  # (K+1,)
            emitted = drafted[:n] + [token]
            kind = PLAIN if not drafted else BONUS if n == n_drafted else CORRECTION
            finish = None

            # An end-of-sequence token ends the run where it stands, even inside the accepted drafts.
            eos_at = next((i for i, t in enumerate(emitted) if t in pair.eos_ids), None)
            if eos_at is not None:
                finish = FINISH_EOS
                if eos_at < n:
                    drafted, n, emitted, kind = drafted[: eos_at + 1], eos_at + 1, emitted[: eos_at + 1], EOS_ACCEPTED
                    p_target, p_draft = p_target[: n], p_draft[: n]

            # Roll back: drop what the target rejected from both caches.
            length_before = len(seq)
            seq.extend(emitted)
            target.crop(len(seq) - 1)
            if model_drafter:
                model_drafter.sync(length_before + n)

            accepted_text = text.commit(drafted[:n])
            rejected_text = text.pieces(drafted[n:])
            emitted_text = accepted_text + (text.commit(emitted[n:]) if kind != EOS_ACCEPTED else [])
            total += len(emitted)
            if finish is None and total >= config.max_new_tokens:
                finish = FINISH_LENGTH
            if finish is not None and text.remainder():
                emitted_text[-1] += text.remainder()  # an unfinished character at the very end
            event = StepEvent(
                step=step,
                drafted=tuple(drafted),
                accepted=n,
                emitted=tuple(emitted),
                kind=kind,
                p_target=tuple(p_target),
                p_draft=tuple(p_draft),
                draft_s=t1 - t0,
                verify_s=t2 - t1,
                total_tokens=total,
                elapsed_s=time.perf_counter() - start - held_s,
                emitted_text=tuple(emitted_text),
                drafted_text=tuple(accepted_text + rejected_text),
                margins=tuple(margins[: len(emitted)]),
                k=k,
                greedy=config.greedy,
                finish=finish,
                paused=bool(draft_length.paused),
                drafter=draft.source if drafted else "",
            )
            handed_over = time.perf_counter()
            yield event
            held_s += time.perf_counter() - handed_over
            if finish is not None:
                return
            draft_length.update(len(drafted), n, t1 - t0, t2 - t1)

    def verify(self, draft: Draft, logits: torch.Tensor, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The acceptance rule: (n_accepted, next_token) as device tensors. logits, probs: (K+1, V).
        A subclass may look on without changing the step (specdec.detail records what the step
        panel shows); a plain run pays one method call for that."""
        if self.config.greedy:
            return greedy_accept(draft.ids, logits)
        return speculative_sample(draft.ids, probs, draft.q, self.generator)


def propose(seq: list[int], k: int, lookup: LookupDrafter | None, model: ModelDrafter | None, device) -> Draft:
    """Prompt lookup first (free); the draft model when lookup finds nothing."""
    if k > 0 and lookup is not None:
        ids = lookup.propose_ids(seq, k)
        if ids:
            return Draft(torch.tensor(ids, device=device), None, "lookup")
    if k > 0 and model is not None:
        return model.propose(seq, k)
    return Draft(torch.empty(0, dtype=torch.long, device=device), None)
