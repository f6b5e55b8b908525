"""Who drafts: every proposer makes a Draft through one interface, and one rule says which of a
run's proposers may draft each step (the K policy chooses among them: specdec.core.k_policy).

A proposer lives for one run. The runner (specdec.core.runners.runner) starts it once the prompt is
in, asks it for up to K tokens when it drafts a step, and tells it after every step what the target
kept (`settle`), handing it what the check computed: the sequence on the device and the target's
final hidden states of the positions it checked (`run.target.features`), so a drafter that reads
the target's features needs no special case in the loop or the runner.

- model.py: a small draft model that shares the target's tokenizer, K passes per draft.
- lookup.py: prompt lookup, the tokens that followed the latest earlier match of the last n-gram.
- head.py: a layer trained on the target's own features, K steps of its own per draft.
"""

from __future__ import annotations

from specdec.core.proposers.base import Draft, Proposer, nothing
from specdec.core.proposers.head import HeadProposer
from specdec.core.proposers.lookup import LookupProposer
from specdec.core.proposers.model import ModelProposer

__all__ = ["Draft", "Proposer", "candidates", "nothing", "proposers_for"]


def proposers_for(parts, config, generator) -> list[Proposer]:
    """A run's proposers (GenerationConfig.drafter): prompt lookup first where it drafts, then the
    draft model and/or the head; none for plain decoding."""
    proposers: list[Proposer] = []
    if config.uses_lookup:
        # With the draft model behind it ("auto"), lookup must match at least 2 tokens: a lone
        # 1-token match guesses worse than the draft model (on the bench prompts, acceptance 0.47
        # against 0.58, and 1.31x against 1.51x over plain; docs/benchmarks.md). The head behind
        # it ("auto_head", "auto_both") keeps the same rule.
        behind = config.uses_draft_model or config.uses_head
        proposers.append(LookupProposer(config.lookup_ngram, 2 if behind else 1))
    if config.uses_draft_model:
        proposers.append(ModelProposer(parts.draft, config, generator))
    if config.uses_head:
        if parts.head is None:
            raise ValueError("drafter 'head' needs a head, and the run was given none")
        proposers.append(HeadProposer(parts.head, config, generator))
    return proposers


def candidates(proposers: list[Proposer], seq: list[int]) -> list[Proposer]:
    """Who may draft this step, for the K policy to choose among: prompt lookup alone where it has a
    match after `seq` or drafts alone, else the run's other proposers (the draft model and/or the
    head); none: nothing drafts."""
    lookup = [p for p in proposers if p.name == "lookup"]
    others = [p for p in proposers if p.name != "lookup"]
    if lookup and (not others or lookup[0].has_draft(seq)):
        return lookup
    return others
