"""specdec.measure.positions: acceptance by draft position and accepted lengths, on hand-made events."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, PLAIN, check_invariants
from specdec.measure.positions import UNNAMED, by_drafter, position_acceptance

from tests.support.events import event


def renumbered(steps):
    """(drafted, accepted, kind, drafter) -> a valid stream of events (steps and totals in order)."""
    events, total = [], 0
    for i, (drafted, accepted, kind, drafter) in enumerate(steps):
        total += accepted + (kind != EOS_ACCEPTED)
        events.append(event(i, drafted, accepted, kind, total, 0.1 * (i + 1), drafter=drafter))
    check_invariants(events)
    return events


@pytest.fixture
def two_drafters():
    return renumbered([
        ((1, 2, 3, 4), 4, BONUS, "model"),  # all four kept: positions 1-4 tested and kept
        ((1, 2, 3, 4), 1, CORRECTION, "model"),  # position 2 rejected: 3 and 4 never judged
        ((5, 6, 7), 2, CORRECTION, "lookup"),
        ((), 0, PLAIN, "model"),  # nothing drafted: counts nowhere
        ((1, 2), 0, CORRECTION, "model"),  # fewer than K drafted, the first one rejected
        ((8,), 1, BONUS, "lookup"),  # a one-token draft, kept
    ])


def test_model_positions_count_only_judged_drafts(two_drafters):
    model = by_drafter(two_drafters)["model"]
    assert model.steps == 3
    assert model.tested == (3, 2, 1, 1)
    assert model.accepted == (2, 1, 1, 1)
    assert model.rates == pytest.approx((2 / 3, 1 / 2, 1.0, 1.0))
    assert model.lengths == (1, 1, 0, 0, 1)  # kept 0, 1 and 4 drafts once each
    assert model.length_shares == pytest.approx((1 / 3, 1 / 3, 0, 0, 1 / 3))


def test_lookup_apart_from_the_model(two_drafters):
    figures = by_drafter(two_drafters)
    assert list(figures) == ["model", "lookup"]  # in the order they first drafted
    lookup = figures["lookup"]
    assert (lookup.steps, lookup.tested, lookup.accepted) == (2, (2, 1, 1), (2, 1, 0))
    assert lookup.rates == pytest.approx((1.0, 1.0, 0.0))
    assert lookup.lengths == (0, 1, 1, 0)


def test_pooled_and_the_totals_agree(two_drafters):
    pooled = position_acceptance(two_drafters)
    assert pooled.drafter == UNNAMED and pooled.steps == 5
    assert pooled.tested == (5, 3, 2, 1) and pooled.accepted == (4, 2, 1, 1)
    assert pooled.lengths == (1, 2, 1, 0, 1)


def test_any_drafter_name_is_its_own_key():
    events = renumbered([((1, 2, 3), 3, BONUS, "head"), ((1, 2, 3), 0, CORRECTION, "head"), ((4,), 0, CORRECTION, "model")])
    figures = by_drafter(events)
    assert list(figures) == ["head", "model"]
    assert figures["head"].tested == (2, 1, 1) and figures["head"].accepted == (1, 1, 1)
    assert figures["head"].lengths == (1, 0, 0, 1)
    unnamed = [replace(e, drafter="") for e in events]
    assert list(by_drafter(unnamed)) == [UNNAMED]


def test_counted_but_unnamed_rejections_and_an_accepted_end():
    # A real engine names only its accepted drafts (the rest are counted in unseen_rejected).
    remote = replace(event(0, (5,), 1, CORRECTION, 2, 0.1), unseen_rejected=2)
    eos = event(1, (6, 7), 2, EOS_ACCEPTED, 4, 0.2)  # the decoding loop cut the draft at the accepted end
    check_invariants([remote, eos])
    figures = position_acceptance([remote, eos])
    assert figures.tested == (2, 2, 0) and figures.accepted == (2, 1, 0)  # position 3 never judged
    assert figures.rates == (1.0, 0.5, None)
    assert figures.lengths == (0, 1, 1, 0)


def test_no_drafts_no_figures():
    plain = renumbered([((), 0, PLAIN, "")] * 3)
    assert by_drafter(plain) == {}
    empty = position_acceptance(plain)
    assert (empty.steps, empty.tested, empty.lengths, empty.rates) == (0, (), (), ())


def test_sums_on_a_random_stream():
    """Whatever the drafts: position 1 is tested once per drafting step, the kept drafts add up to
    the run's accepted count, and every drafting step has one length."""
    rng = random.Random(7)
    steps = []
    for _ in range(200):
        n = rng.randint(0, 6)
        kept = rng.randint(0, n)
        steps.append((tuple(range(n)), kept, PLAIN if not n else BONUS if kept == n else CORRECTION, rng.choice(["model", "head"])))
    events = renumbered(steps)
    for name, figures in by_drafter(events).items():
        mine = [e for e in events if e.drafter == name]
        assert figures.tested[0] == figures.steps == sum(figures.lengths) == len(mine)
        assert sum(figures.accepted) == sum(e.accepted for e in mine)
        assert sum(n * count for n, count in enumerate(figures.lengths)) == sum(e.accepted for e in mine)
        assert all(a <= t for a, t in zip(figures.accepted, figures.tested))
        assert all(later <= earlier for earlier, later in zip(figures.tested, figures.tested[1:]))
