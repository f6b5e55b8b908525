"""Acceptance rules on hand-made logits over a 10-token vocabulary."""

import torch

from specdec.core.acceptance import greedy_accept, speculative_sample

V = 10


def one_hot_logits(ids):
    """(len(ids), V) logits whose argmax in row i is ids[i]."""
    logits = torch.zeros(len(ids), V)
    logits[torch.arange(len(ids)), torch.tensor(ids)] = 5.0
    return logits


def test_greedy_accepts_all_and_adds_bonus():
    n, token = greedy_accept(torch.tensor([3, 1, 4]), one_hot_logits([3, 1, 4, 7]))
    assert (int(n), int(token)) == (3, 7)


def test_greedy_rejects_first():
    n, token = greedy_accept(torch.tensor([2, 1, 4]), one_hot_logits([3, 1, 4, 7]))
    assert (int(n), int(token)) == (0, 3)


def test_greedy_rejects_middle_and_ignores_later_matches():
    n, token = greedy_accept(torch.tensor([3, 9, 4]), one_hot_logits([3, 1, 4, 7]))
    assert (int(n), int(token)) == (1, 1)


def test_greedy_with_no_drafts_is_plain_argmax():
    n, token = greedy_accept(torch.empty(0, dtype=torch.long), one_hot_logits([6]))
    assert (int(n), int(token)) == (0, 6)


def dist(mass: dict[int, float]) -> torch.Tensor:
    row = torch.zeros(V)
    for i, m in mass.items():
        row[i] = m
    return row / row.sum()


def test_sampling_accepts_when_target_likes_draft_more():
    # p(d) >= q(d) at every draft: kept with probability 1; bonus from p's last row (one-hot).
    p = torch.stack([dist({3: 0.9, 1: 0.1}), dist({1: 0.8, 2: 0.2}), dist({7: 1.0})])
    q = torch.stack([dist({3: 0.5, 5: 0.5}), dist({1: 0.5, 2: 0.5})])
    for seed in range(20):
        n, token = speculative_sample(torch.tensor([3, 1]), p, q, torch.Generator().manual_seed(seed))
        assert (int(n), int(token)) == (2, 7)


def test_sampling_rejects_first_token_target_never_picks():
    # p(d0) = 0: always rejected; the correction comes from max(0, p - q), here only token 4.
    p = torch.stack([dist({4: 0.6, 5: 0.4}), dist({1: 1.0}), dist({2: 1.0})])
    q = torch.stack([dist({3: 0.5, 5: 0.5}), dist({1: 1.0})])
    for seed in range(20):
        n, token = speculative_sample(torch.tensor([3, 1]), p, q, torch.Generator().manual_seed(seed))
        assert (int(n), int(token)) == (0, 4)


def test_sampling_rejects_middle():
    p = torch.stack([dist({3: 1.0}), dist({8: 1.0}), dist({2: 1.0}), dist({0: 1.0})])
    q = torch.stack([dist({3: 1.0}), dist({6: 1.0}), dist({2: 1.0})])
    n, token = speculative_sample(torch.tensor([3, 6, 2]), p, q, torch.Generator().manual_seed(0))
    assert (int(n), int(token)) == (1, 8)


def test_deterministic_drafter_residual_excludes_the_rejected_token():
    # Prompt lookup: q is one-hot, so after a rejection the token is drawn from p without d.
    p = torch.stack([dist({3: 0.5, 4: 0.5}), dist({9: 1.0})])
    seen = set()
    for seed in range(200):
        n, token = speculative_sample(torch.tensor([3]), p, None, torch.Generator().manual_seed(seed))
        seen.add((int(n), int(token)))
    assert seen == {(1, 9), (0, 4)}
