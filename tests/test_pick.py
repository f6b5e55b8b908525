"""Who drafts a step (specdec.core.proposers.pick): among prompt lookup where it matches and the run's
fallback drafter, the one whose K policy choice predicts the most tokens a second; lookup first on a
tie and wherever the policy predicts nothing (fixed and adaptive K)."""

from specdec.core.k_policy import Choice, CostK, FixedK
from specdec.core.proposers import pick
from specdec.measure.passcost import PassCosts


class Stub:
    def __init__(self, name: str, matches: bool = True):
        self.name, self.matches = name, matches

    def has_draft(self, seq) -> bool:
        return self.matches

    def unseen(self, seq) -> int:
        return 1


def choices(rates: dict):
    return lambda drafter, unseen: Choice(2, rates[drafter])


def test_the_faster_prediction_drafts():
    lookup, head = Stub("lookup"), Stub("head")
    assert pick([lookup, head], [], choices({"lookup": 12.0, "head": 14.0}))[0] is head
    assert pick([lookup, head], [], choices({"lookup": 15.0, "head": 14.0}))[0] is lookup
    assert pick([lookup, head], [], choices({"lookup": 14.0, "head": 14.0}))[0] is lookup  # a tie: lookup, as before


def test_without_a_match_or_a_prediction_the_order_decides():
    lookup, head = Stub("lookup", matches=False), Stub("head")
    assert pick([lookup, head], [], choices({"lookup": 99.0, "head": 1.0}))[0] is head  # no match: the fallback
    fixed = FixedK(3)
    proposer, choice = pick([Stub("lookup"), head], [], fixed.choose)
    assert proposer.name == "lookup" and choice.k == 3  # fixed K predicts nothing: lookup wherever it matches
    assert pick([], [], fixed.choose)[0] is None


def test_lookup_that_keeps_missing_gives_way_to_the_head():
    """The cost policy's own estimates: lookup (free drafts) wins while its record is good, and after
    a run of turned-down lookup drafts the head, accepted half the time, drafts instead."""
    costs = PassCosts((1, 2, 3, 4, 6, 8, 12, 16), tuple(0.07 * (1 + 0.04 * n) for n in (1, 2, 3, 4, 6, 8, 12, 16)), 0.03, 200, 3,
                      head_s=0.005, head_first_s=0.006)
    policy = CostK(costs, 8, {"lookup": 0.6, "head": 0.5, "model": 0.5})
    lookup, head = Stub("lookup"), Stub("head")
    proposer, choice = pick([lookup, head], [], policy.choose)
    assert proposer is lookup
    for _ in range(4):
        policy.update(choice, choice.k, 0, "lookup")
    assert pick([lookup, head], [], policy.choose)[0] is head
