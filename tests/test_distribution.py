"""Rejection sampling is lossless: emitted tokens follow the target's distribution, whatever the
draft proposes. Checked with a chi-square test; a deliberately broken rule must fail the same test.
Both rules: torch.multinomial's (eager runner) on a CPU, and the exponential race's (static and
compiled runners) on every device present."""

import pytest
import torch
from scipy.stats import chisquare

from specdec.core import acceptance
from specdec.core.acceptance import race_sample, speculative_sample

SIGNIFICANCE = 1e-3  # a correct rule fails this test once in a thousand seeds
TRIALS = 4000
K = 2
# Target p and draft q far apart: q puts most mass where p puts little.
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = torch.tensor([0.02, 0.03, 0.05, 0.10, 0.30, 0.50])


def broken_rule(draft_ids, p, q, generator):
    """Accepts like the real rule, but resamples from p instead of max(0, p - q) after a rejection."""
    n, _ = speculative_sample(draft_ids, p, q, generator)
    return n, torch.multinomial(p[n], 1, generator=generator).squeeze(0)


def emitted_counts(rule, position: int) -> list[int]:
    """Counts of the token emitted at `position` (0 or 1) over many runs of a context-free model."""
    generator = torch.Generator().manual_seed(1234)
    p = P.expand(K + 1, -1)
    q = Q.expand(K, -1)
    counts = [0] * len(P)
    for _ in range(TRIALS):
        drafts = torch.multinomial(q, 1, generator=generator).squeeze(-1)  # (K,)
        n, token = rule(drafts, p, q, generator)
        emitted = drafts[: int(n)].tolist() + [int(token)]
        if len(emitted) > position:
            counts[emitted[position]] += 1
    return counts


def p_value(counts) -> float:
    total = sum(counts)
    return chisquare(counts, [total * float(x) for x in P]).pvalue


def test_first_token_matches_target_distribution():
    assert p_value(emitted_counts(speculative_sample, 0)) > SIGNIFICANCE


def test_token_after_an_accepted_draft_matches_target_distribution():
    counts = emitted_counts(speculative_sample, 1)
    assert sum(counts) > 300  # enough runs kept the first draft for the test to mean something
    assert p_value(counts) > SIGNIFICANCE


def test_broken_rule_is_detected():
    assert p_value(emitted_counts(broken_rule, 0)) < SIGNIFICANCE


# --- the race sampler (the engine's one rule), on every device present ------------------------
# speculative_sample draws with exponential clocks (Tensor.exponential_), which on CUDA come
# from its own generator (Philox): the same tests run on each device, and a race run with uniform
# clocks, a plausible slip, must fail them.

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here"))]
DRAWS = 20000  # race_sample draws every row of one (DRAWS, V) tensor in one call
# Unnormalised, with a zero: the race must take rows as they are, and a zero never wins.
P_RACE = torch.tensor([0.40, 0.25, 0.0, 0.15, 0.12, 0.08]) * 3.7


def uniform_race(probs, generator):
    """The race with uniform clocks instead of exponential ones: argmax p_i / U_i favours the
    likeliest tokens beyond their share."""
    clocks = torch.empty_like(probs, dtype=torch.float32).uniform_(generator=generator)
    return torch.where(probs > 0, probs.float() / clocks.clamp_min(1e-30), -1.0).argmax(dim=-1)


def race_counts(race, device: str) -> list[int]:
    generator = torch.Generator(device=device).manual_seed(99)
    drawn = race(P_RACE.to(device).expand(DRAWS, -1), generator)  # (DRAWS,)
    return torch.bincount(drawn.cpu(), minlength=len(P_RACE)).tolist()


def race_p_value(counts) -> float:
    kept = [i for i, p in enumerate(P_RACE.tolist()) if p > 0]
    share = P_RACE[kept] / P_RACE.sum()
    return chisquare([counts[i] for i in kept], [sum(counts) * float(x) for x in share]).pvalue


def emitted_counts_on(device: str, position: int) -> list[int]:
    """emitted_counts of speculative_sample with p, q and the generator on `device`."""
    generator = torch.Generator(device=device).manual_seed(1234)
    p, q = P.to(device).expand(K + 1, -1), Q.to(device).expand(K, -1)
    counts = [0] * len(P)
    for _ in range(TRIALS):
        drafts = torch.multinomial(q, 1, generator=generator).squeeze(-1)  # (K,)
        n, token = speculative_sample(drafts, p, q, generator)
        emitted = drafts[: int(n)].tolist() + [int(token)]
        if len(emitted) > position:
            counts[emitted[position]] += 1
    return counts


@pytest.mark.parametrize("device", DEVICES)
def test_the_race_draws_each_token_by_its_share(device):
    counts = race_counts(race_sample, device)
    assert counts[2] == 0  # p = 0 never wins
    assert race_p_value(counts) > SIGNIFICANCE


@pytest.mark.parametrize("device", DEVICES)
def test_a_race_with_uniform_clocks_is_detected(device):
    assert race_p_value(race_counts(uniform_race, device)) < SIGNIFICANCE


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("position", [0, 1])
def test_the_race_rule_emits_the_target_distribution(device, position):
    counts = emitted_counts_on(device, position)
    assert sum(counts) > 300  # at position 1: enough runs kept the first draft for the test to mean something
    assert p_value(counts) > SIGNIFICANCE


@pytest.mark.parametrize("device", DEVICES)
def test_the_race_rule_with_uniform_clocks_is_detected(device, monkeypatch):
    monkeypatch.setattr(acceptance, "race_sample", uniform_race)  # the residual's draw, as speculative_sample makes it
    assert p_value(emitted_counts_on(device, 0)) < SIGNIFICANCE
