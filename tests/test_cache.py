"""After every step both KV caches hold exactly the committed sequence (minus the token that the
next pass feeds), with the same keys a fresh prefill of that sequence would give."""

import pytest
import torch

from specdec.core.runners.eager_model import CachedModel
from specdec.core.config import GenerationConfig
from specdec.engines.ours import OurSource
from tests.support.runner_checks import valid_slots

PROMPT = "for i in range(10):"


def cached_tensors(lm: CachedModel) -> list[torch.Tensor]:
    """Every layer's keys and values at the positions the cache holds, in that order."""
    return valid_slots(lm, lm.length)


def fresh_tensors(model, vocab_size, ids):
    lm = CachedModel(model, vocab_size)
    lm.prefill(torch.tensor(ids, device=model.device))
    return cached_tensors(lm)


def assert_cache_matches(lm: CachedModel, model, vocab_size, ids):
    assert lm.length == len(ids)
    got, want = cached_tensors(lm), fresh_tensors(model, vocab_size, ids)
    assert len(got) == len(want) == 2 * lm.model.config.num_hidden_layers
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("config", [
    GenerationConfig(k=4, max_new_tokens=24),
    GenerationConfig(k=3, max_new_tokens=24, temperature=1.0, seed=3),
    GenerationConfig(k=4, max_new_tokens=24, drafter="auto"),
], ids=["greedy", "sampling", "auto"])
def test_caches_roll_back_exactly(tiny_pair, config):
    run = OurSource(tiny_pair, config).run(PROMPT)
    kinds = set()
    for event in run:
        kinds.add(event.kind)
        committed = run.seq[:-1]  # the last token is fed at the start of the next pass
        assert_cache_matches(run.target, tiny_pair.target, tiny_pair.vocab_size, committed)
        draft = run.proposers[-1].lm  # the draft model the model proposer drafts with
        behind = len(committed) - draft.length  # positions the draft model has not seen yet
        if config.drafter == "model":
            # Fully accepted draft: the draft has not yet fed its own last token. A plain step
            # (the last of a run, when one token is left) feeds nothing to the draft model.
            allowed = {"correction": {0}, "bonus": {1}, "plain": {1, 2}, "eos": {0, 1}}[event.kind]
            assert behind in allowed, (event.kind, behind)
        else:
            assert behind >= 0  # prompt lookup drafted some steps; the draft model catches up later
        assert_cache_matches(draft, tiny_pair.draft, tiny_pair.vocab_size, run.seq[: draft.length])
    assert "correction" in kinds  # rollback really happened
