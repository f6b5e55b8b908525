"""Rejection sampling is lossless: emitted tokens follow the target's distribution, whatever the
draft proposes. Checked with a chi-square test; a deliberately broken rule must fail the same test."""

import torch
from scipy.stats import chisquare

from specdec.core.acceptance import speculative_sample

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
