"""The speculative decoding loop: draft -> verify -> accept -> roll back caches, one event per step.

Cache invariant: after every step the target's cache holds exactly the sequence minus its last
token (that token is fed at the start of the next target pass, followed by the new drafts); the
draft model's cache holds the same, or one position less after a fully accepted draft (its last
draft token and the bonus token are fed together at the start of the next draft).
Plain decoding is this same loop with nothing drafted: one token per target pass.
How many tokens to draft each step is a K policy's choice (specdec.core.k_policy), made from counts and
a cost table fixed before the run, never from the clock, so seeded runs are reproducible.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import torch

from specdec.core.acceptance import greedy_accept, speculative_sample
from specdec.core.cached_model import CachedModel
from specdec.core.config import GenerationConfig
from specdec.measure.cost_table import costs_for
from specdec.core.drafters import Draft, LookupDrafter, ModelDrafter
from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, FINISH_EOS, FINISH_LENGTH, PLAIN, StepEvent
from specdec.core.k_policy import Choice, CostK, make_policy
from specdec.models.pair import ModelPair
from specdec.measure.passcost import PassCosts
from specdec.core.sampling import probs_from_logits
from specdec.kernels.target_kernels import kernel_target
from specdec.core.text import TextTracker
from specdec.kernels.variants import draft_model


def generate(
    pair: ModelPair,
    prompt: str,
    config: GenerationConfig,
    *,
    chat: bool | None = None,
    stop: threading.Event | None = None,
    decoding: type[Decoding] | None = None,
    costs: PassCosts | None = None,
) -> "Decoding":
    """Validate the input, then stream one StepEvent per target forward pass. `decoding`: the class
    that runs it, a Decoding that may look on without changing the events (specdec.core.detail's
    DetailedDecoding records what the step panel shows; specdec.core.detail.generate_detailed).
    costs: the cost table the cost K policy reads (default: specdec.measure.cost_table's, cached or
    measured here, before the run's clock starts)."""
    config.validate()
    prompt_ids = pair.encode_prompt(prompt, chat=pair.chat if chat is None else chat, max_new_tokens=config.max_new_tokens)
    if config.drafter in ("model", "auto") and pair.draft is None:
        raise ValueError(f"drafter 'model' needs a draft model, and pair {pair.name!r} has none")
    return (decoding or Decoding)(pair, prompt_ids, config, stop, costs)


class Decoding:
    """One generation run; iterate it for the StepEvents. Its caches are open to inspection
    (the tests check the rollback after every step)."""

    def __init__(self, pair: ModelPair, prompt_ids: list[int], config: GenerationConfig, stop=None,
                 costs: PassCosts | None = None):
        self.pair, self.config, self.stop = pair, config, stop
        self.generator = torch.Generator(device=pair.device).manual_seed(config.seed)  # seeded once per run
        self.target = CachedModel(kernel_target(pair, config.target_kernel), pair.vocab_size)  # built once per pair and kernel
        self.costs = costs  # the cost table (cost K policy only): read or measured now, before the run's clock
        if config.policy == "cost" and config.drafter != "none" and costs is None:
            self.costs = costs_for(pair, config, target=self.target.model)
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
        policy = make_policy(config.policy if config.drafter != "none" else "fixed", config.k, config.k_max, self.costs)
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
            source = drafter_at(seq, config, lookup) if isinstance(policy, CostK) else "model"
            choice = policy.choose(source) if config.drafter != "none" else Choice(0)
            # Leave room for the target's own token so a step never overshoots max_new_tokens.
            k = min(choice.k, config.max_new_tokens - total - 1)

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
                paused=choice.paused,
                drafter=draft.source if drafted else "",
                predicted_tok_s=choice.predicted_tok_s,
            )
            handed_over = time.perf_counter()
            yield event
            held_s += time.perf_counter() - handed_over
            if finish is not None:
                return
            policy.update(choice, len(drafted), n, draft.source or source)  # counts only, never the clock

    def verify(self, draft: Draft, logits: torch.Tensor, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The acceptance rule: (n_accepted, next_token) as device tensors. logits, probs: (K+1, V).
        A subclass may look on without changing the step (specdec.core.detail records what the step
        panel shows); a plain run pays one method call for that."""
        if self.config.greedy:
            return greedy_accept(draft.ids, logits)
        return speculative_sample(draft.ids, probs, draft.q, self.generator)


def drafter_at(seq: list[int], config: GenerationConfig, lookup: LookupDrafter | None) -> str:
    """Who will draft this step (the cost policy prices the two apart): prompt lookup where it has
    a match (whether it has one does not depend on K), else the draft model."""
    if config.drafter == "lookup" or (lookup is not None and lookup.propose_ids(seq, 1)):
        return "lookup"
    return "model"


def propose(seq: list[int], k: int, lookup: LookupDrafter | None, model: ModelDrafter | None, device) -> Draft:
    """Prompt lookup first (free); the draft model when lookup finds nothing."""
    if k > 0 and lookup is not None:
        ids = lookup.propose_ids(seq, k)
        if ids:
            return Draft(torch.tensor(ids, device=device), None, "lookup")
    if k > 0 and model is not None:
        return model.propose(seq, k)
    return Draft(torch.empty(0, dtype=torch.long, device=device), None)
