"""What every engine shares: the engines' names, what a source of steps can do (Capabilities), the
protocol of a source of steps (our engine's, specdec.engines.ours, and every remote one's), a remote
engine's one-line error, and the assembler that turns "these tokens, so many drafted, so many
accepted" into StepEvents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol

from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, OUR_ENGINE, PLAIN, StepEvent
from specdec.core.text import TextTracker

SPECDEC = OUR_ENGINE  # this project's engine, named where the event contract is (StepEvent.engine's default)
LLAMA_CPP, VLLM = "llama.cpp", "vllm"  # the real engines' names: the only place they are written
ENGINES = (SPECDEC, LLAMA_CPP, VLLM)  # values of StepEvent.engine


@dataclass(frozen=True)
class Capabilities:
    """What a source of steps can do, declared by the source, so that callers ask what it can do
    rather than which engine it is."""

    in_process: bool  # runs the pair in this process: no server address; the GPU budget learns its step times
    follows_settings: bool  # runs with the page's drafter, K, K policy, target kernel and sampling (a server keeps those it was started with, greedy)
    steps_through: bool  # a run can be held and advanced one step per call (Step, Run to end)
    sweeps_k: bool  # the draft length can change from one run to the next (Sweep K)
    reports_p_q: bool  # p_target, p_draft, the draws u and the step panel's distributions
    lossy_lane: bool  # can run the lossy lane beside it (plain decoding on an int4 copy of the target)
    own_cost_table: bool  # its pass costs are measured here under its own name (a co-design point takes c from them)
    starts_embedded: bool  # the page can start its servers on the embedded pair
    side_by_side: bool  # its servers fit beside our pair for a whole bench (vLLM's take over 12 GB: one at a time)
    forces_tokens: bool = False  # says its top-1 next token along a given text (forced_predictions: faithfulness)


class EngineError(RuntimeError):
    """A remote engine failed; the message is one line that names the engine, the address and what
    went wrong (not reachable, answered something else, speculation off, exited, see log ...)."""


class StepSource(Protocol):
    """A source of StepEvents: one target pass per event, in order, from our engine or a real one.

    The plain lane is the same kind of source with nothing drafted (a server started without a draft)."""

    engine: str  # StepEvent.engine of what it yields
    capabilities: Capabilities  # what it can do, for callers that must not test `engine`

    def iter_events(self, prompt_ids: list[int], max_new_tokens: int) -> Iterator[StepEvent]:
        """Generate from `prompt_ids` (already templated) and yield one event per step, as soon as
        the step is known (a remote engine: greedily, raising EngineError with one line on any failure)."""
        ...

    # A source whose capabilities say forces_tokens also has
    #   forced_predictions(prompt_ids, reference) -> list[int]
    # its top-1 next token after the prompt and each prefix of `reference` (specdec.measure.faithfulness),
    # and one of: forced_pass(prompt_ids, reference) -> ForcedPass (ours: the whole distribution at each
    # position) or forced_tops(prompt_ids, reference, n) -> (top-1s, [{token: log-probability}] of its n
    # most likely tokens at each position) (a server).


class StepAssembler:
    """Builds the events of one remote run, step by step, from what the engine says of each step.

    Text pieces come from the project's tokenizer over the whole sequence (specdec.core.text), as in our
    engine. The engine names only the tokens it emitted, so `drafted` holds the accepted drafts and
    the rejected ones are counted in `unseen_rejected`; p, q, margins and the draft/verify seconds
    are None (not reported)."""

    def __init__(self, engine: str, tokenizer, prompt_ids: list[int], k: int = 0):
        self.engine = engine
        self.text = TextTracker(tokenizer, prompt_ids)
        self.k = k  # the draft length the server was started with (0: plain); per step the drafted count is used
        self.step = 0
        self.total = 0

    def event(self, ids: list[int], drafted: int, accepted: int, elapsed_s: float, finish: str | None = None) -> StepEvent:
        """One step: `ids` the tokens it emitted, in order; `drafted`/`accepted` the engine's counts
        for it (drafted 0: a plain step, e.g. the first token, which comes from the prompt pass).

        Normally len(ids) == accepted + 1 (the accepted drafts, then the target's own token). Fewer
        means the run ended inside the step, on an accepted draft (an end-of-text token among them,
        or a length limit the engine did not take off its counts): the step is then of kind "eos",
        its accepted count cut to the tokens emitted, like our engine's; the drafts the engine
        rejected stay counted."""
        if not ids:
            raise ValueError("a step emits at least one token")
        if drafted < 0 or accepted < 0:
            raise ValueError(f"drafted {drafted} and accepted {accepted} must not be negative")
        rejected = max(0, drafted - accepted)  # an engine never reports more accepted than drafted; clamp if it does
        if len(ids) > accepted + 1:
            raise ValueError(f"{self.engine} step {self.step}: {len(ids)} tokens for {accepted} accepted drafts + 1")
        if not drafted and not accepted:
            kind = PLAIN
        elif len(ids) <= accepted:  # cut short on an accepted draft
            kind, accepted = EOS_ACCEPTED, len(ids)
        else:
            kind = CORRECTION if rejected else BONUS
        pieces = tuple(self.text.commit(list(ids)))
        self.total += len(ids)
        event = StepEvent(
            step=self.step, drafted=tuple(ids[:accepted]), accepted=accepted, emitted=tuple(ids), kind=kind,
            p_target=None, p_draft=None, draft_s=None, verify_s=None, total_tokens=self.total, elapsed_s=elapsed_s,
            emitted_text=pieces, drafted_text=pieces[:accepted], margins=None,
            k=accepted + rejected if kind != PLAIN else 0, finish=finish, drafter="model" if kind != PLAIN else "",
            engine=self.engine, unseen_rejected=rejected,
        )
        self.step += 1
        return event
