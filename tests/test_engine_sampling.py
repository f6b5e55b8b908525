"""Speculative sampling through the whole engine emits what plain sampling from the target emits.

tests/test_distribution.py checks the acceptance rule on hand-made p and q; this checks the path
around it: the draft's q comes from the same processed logits its token is sampled from, the
target's p uses the same temperature, top-k and top-p, and the draft really samples. The models
are a pair built for it: causal LMs whose logits depend on the last token only, set by hand (a
bigram table over 8 tokens), run by the engine like any model. Then every emitted token must
follow row `previous token` of the target's processed distribution, and one run gives a
thousand draws in seconds. Each known way to get this wrong (other
engines have shipped them) is patched in and must fail the same test. Both runners are checked:
eager (transformers' growing cache) and static (a preallocated cache in fixed shapes): the same
step, proposer and rule over two kinds of model (specdec.core.runners).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from specdec.core import sampling
from specdec.core.acceptance import race_sample, residual, speculative_sample
from specdec.core.proposers import model as model_proposer
from specdec.core.runners import runner as runner_step
from specdec.core.config import GenerationConfig
from specdec.models.pair import ModelPair
from tests.support.bigram import (CONFIG, SIGNIFICANCE, TEMPERATURE, TOP_K, TOP_P, VOCAB, BigramLM, parity_table,
                                  transition_p_value, word_tokenizer)
from tests.support.runs import run_checked, tokens


@pytest.fixture(scope="module")
def bigram():
    """(pair, target logits): a draft that is the target's table plus noise (acceptance about 0.7)."""
    gen = torch.Generator().manual_seed(0)
    target = 1.5 * torch.randn(2, VOCAB, generator=gen)
    draft = target + 0.8 * torch.randn(2, VOCAB, generator=gen)
    target, draft = parity_table(target), parity_table(draft)
    pair = ModelPair("bigram", BigramLM(target), BigramLM(draft), word_tokenizer(VOCAB), torch.device("cpu"),
                     torch.float32, chat=False, eos_ids=frozenset({-1}))  # no end-of-sequence: an id never emitted
    return pair, target


def test_the_bigram_pair_is_what_it_claims(bigram):
    from specdec.core.runners.eager_model import CachedModel

    pair, target = bigram
    lm = CachedModel(pair.target, VOCAB)
    torch.testing.assert_close(lm.forward(torch.tensor([3, 7, 2]), last_only=False), target[[3, 7, 2]])
    assert lm.length == 3 and torch.equal(lm.forward(torch.tensor([4]), last_only=True), target[[4]])
    lm.crop(2)
    assert lm.length == 2


RUNNERS = ("eager", "static")
# Where each runner looks up what the broken variants replace: (the draft's module, the name of its
# sampler there, the real sampler, the module that computes the target's p). Both runners run the
# same proposer and step: the broken variants reach both through the same names.
PARTS = {runner: (model_proposer, "race_sample", race_sample, runner_step) for runner in RUNNERS}


@pytest.mark.parametrize("runner", RUNNERS)
def test_speculative_sampling_follows_the_target(bigram, runner):
    pair, target = bigram
    config = replace(CONFIG, runner=runner)
    events = run_checked(pair, "t0 t1", replace(config, max_new_tokens=64))
    accepted = sum(e.accepted for e in events) / sum(len(e.drafted) for e in events)
    assert 0.3 < accepted < 0.95  # drafts are accepted and rejected: both halves of the rule are used
    assert transition_p_value(pair, target, config) > SIGNIFICANCE


@pytest.mark.parametrize("runner", RUNNERS)
def test_plain_sampling_passes_the_same_test(bigram, runner):
    pair, target = bigram
    assert transition_p_value(pair, target, replace(CONFIG, drafter="none", runner=runner)) > SIGNIFICANCE


def _q_from_raw_logits(monkeypatch, runner):
    """The draft samples from its processed distribution but reports q from the raw logits (T = 1,
    no top-k / top-p): transformers #47932."""
    module, name, real_sample, _ = PARTS[runner]
    real_probs = sampling.probs_from_logits
    monkeypatch.setattr(module, "probs_from_logits", lambda logits, *args, **kwargs: torch.softmax(logits.float(), -1))
    # softmax is unchanged by a shift, so log(q_raw) are the logits again: sample from them processed
    monkeypatch.setattr(module, name, lambda q, g: real_sample(real_probs(q.log(), TEMPERATURE, TOP_K, TOP_P), g))


def _target_without_temperature(monkeypatch, runner):
    """The draft's q at the temperature, the target's p without it."""
    real = sampling.probs_from_logits
    monkeypatch.setattr(PARTS[runner][3], "probs_from_logits", lambda logits, t, top_k=0, top_p=1.0: real(logits, 1.0, top_k, top_p))


def _greedy_draft_with_its_q(monkeypatch, runner):
    """The draft proposes its argmax while its q is used as if it had sampled: transformers #32867."""
    module, name, _, _ = PARTS[runner]
    monkeypatch.setattr(module, name, lambda q, g: q.argmax(dim=-1))


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("break_it", [_q_from_raw_logits, _target_without_temperature, _greedy_draft_with_its_q])
def test_a_broken_engine_fails_the_test(bigram, monkeypatch, break_it, runner):
    pair, target = bigram
    break_it(monkeypatch, runner)
    assert transition_p_value(pair, target, replace(CONFIG, runner=runner)) < SIGNIFICANCE


# --- the bonus token ------------------------------------------------------------------------------

K = 2
TRIALS = 4000
# Rows that differ per position, so that drawing the bonus from the wrong row shows.
P_ROWS = torch.tensor([[0.40, 0.25, 0.15, 0.10, 0.06, 0.04],
                       [0.05, 0.40, 0.30, 0.10, 0.10, 0.05],
                       [0.10, 0.05, 0.05, 0.20, 0.25, 0.35]])  # (K+1, V): row K is the bonus distribution
Q_ROWS = torch.tensor([[0.30, 0.30, 0.15, 0.10, 0.10, 0.05],
                       [0.10, 0.35, 0.25, 0.15, 0.10, 0.05]])  # (K, V): close enough that most drafts are kept


def bonus_from_previous_row(draft_ids, p, q, generator):
    """The bonus drawn from row K - 1 (an off-by-one)."""
    n, token = speculative_sample(draft_ids, p, q, generator)
    if int(n) == K:
        token = torch.multinomial(p[K - 1], 1, generator=generator).squeeze(0)
    return n, token


def bonus_from_a_residual(draft_ids, p, q, generator):
    """The bonus drawn from normalise(max(0, p_K - q_{K-1})), as if the last draft had been rejected."""
    n, token = speculative_sample(draft_ids, p, q, generator)
    if int(n) == K:
        token = torch.multinomial(residual(p[K], q[K - 1]), 1, generator=generator).squeeze(0)
    return n, token


def bonus_counts(rule) -> list[int]:
    generator = torch.Generator().manual_seed(4321)
    counts = [0] * P_ROWS.shape[1]
    for _ in range(TRIALS):
        drafts = torch.multinomial(Q_ROWS, 1, generator=generator).squeeze(-1)  # (K,)
        n, token = rule(drafts, P_ROWS, Q_ROWS, generator)
        if int(n) == K:
            counts[int(token)] += 1
    return counts


def bonus_p_value(counts) -> float:
    from scipy.stats import chisquare

    return chisquare(counts, [sum(counts) * float(x) for x in P_ROWS[K]]).pvalue


def test_bonus_token_follows_the_target_at_position_k_plus_1():
    counts = bonus_counts(speculative_sample)
    assert sum(counts) > TRIALS / 3  # enough fully accepted drafts for the test to mean something
    assert bonus_p_value(counts) > SIGNIFICANCE


@pytest.mark.parametrize("rule", [bonus_from_previous_row, bonus_from_a_residual])
def test_a_wrong_bonus_row_is_detected(rule):
    assert bonus_p_value(bonus_counts(rule)) < SIGNIFICANCE


# --- a temperature so small that logits / T overflows ---------------------------------------------


def test_tiny_temperature_samples_the_greedy_output(tiny_pair):
    greedy = tokens(run_checked(tiny_pair, "def add(a, b):", GenerationConfig(drafter="none", max_new_tokens=24)))
    for drafter in ("model", "none"):
        config = GenerationConfig(k=4, temperature=1e-40, drafter=drafter, max_new_tokens=24)
        events = run_checked(tiny_pair, "def add(a, b):", config)
        assert tokens(events) == greedy
        assert all(p in (0.0, 1.0) for e in events for p in e.p_target)  # one-hot rows: no NaN anywhere
