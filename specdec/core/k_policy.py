"""How many tokens to draft each step: K, where 0 means draft nothing (a plain decoding step).

Three policies, one per `GenerationConfig.k_policy` (config.K_POLICIES):

- fixed: K every step.
- adaptive: +2 after a fully accepted draft, -1 otherwise, within 1..k_max.
- cost: the K in 0..k_max that maximises the predicted tokens per second,

      rate(K) = E(alpha, K) / (K * draft_s + target_s(K + 1)),   E = (1 - alpha^(K+1)) / (1 - alpha)

  (Leviathan et al. 2023's expected tokens per pass, specdec.core.theory), with rate(0) = 1 / target_s(1),
  the plain decoding step of the same target. The draft model's first pass of a step feeds every
  token it has not seen (after plain or lookup steps, all of theirs) and finds its weights pushed
  out of the caches by the target's pass, so it is priced as that pass, draft_s(n), timed so, and
  the K - 1 after it as one-token passes with the weights cached. draft_s and target_s come from a cost table measured
  before the run (specdec.measure.cost_table); a drafting step also pays its overhead outside the
  timed passes (step_overhead_s); alpha from the acceptance counted so far (AcceptanceEstimate),
  which starts from the drafter's recorded acceptance (specdec.core.recorded_acceptance), not from
  a guess. Since K = 0 is always a candidate, every step the policy chooses on its own is predicted
  to be at least as fast as plain decoding of the same target: "never slower than plain" holds by
  construction in this model. The exceptions are the probes (below), whose cost is bounded.

Every policy decides from counts (drafted, accepted) and numbers fixed before the run, never from
the clock of the step, so a seeded run gives the same tokens however long its steps happen to take.
Pure: no torch, no timing; the engine asks `choose` before a step and reports with `update` after.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from specdec.core.config import K_POLICIES
from specdec.core.recorded_acceptance import FALLBACK, highest as recorded_highest, priors as recorded_priors
from specdec.core.theory import expected_tokens_per_pass

# A drafting step's time outside the timed passes (the acceptance rule, the caches' rollback, the
# text), in decode steps: `bench --predictions` finds the accounting from the passes within 0.1% to
# 0.4% of the measurement (docs/benchmarks.md, "The app's three predictions"; issue 37), of a step
# that lasts about 1 to 3 decode steps, so about 0.01 decode steps. Used where the cost table
# carries no overhead of its own (PassCosts.overhead_s).
OVERHEAD_STEPS = 0.01


DRAFTER_NAMES = {"model": "the draft model", "head": "the trained head", "lookup": "prompt lookup"}


@dataclass(frozen=True)
class Choice:
    k: int  # draft length asked for this step (0: draft nothing)
    predicted_tok_s: float | None = None  # tokens/s the cost model predicts at this K (None: the policy has no cost table)
    paused: bool = False  # K = 0 because drafting would not pay at the measured costs (cost policy only)
    probe: bool = False  # K = 1 only to learn whether drafting pays again (cost policy only)
    why: str = ""  # on a paused step: why drafting would not pay, with the figures (cost policy only)


class Costs(Protocol):
    """What the cost policy reads of a cost table (specdec.measure.passcost.PassCosts has it)."""

    draft_s: float | None  # seconds of one further one-token draft-model pass (its weights cached by the first)
    head_s: float | None  # seconds of one further draft of the trained head (its weights cached by the draft before)
    head_first_s: float | None  # seconds of the head's first draft of a step, after the target's pass (None: head_s)

    def target_pass_s(self, n: float) -> float: ...  # seconds of one target pass over n tokens

    def draft_pass_s(self, n: float) -> float | None: ...  # seconds of a step's first draft-model pass, feeding n tokens


def last_option(policy, options: list[tuple[str, int]]) -> tuple[int, Choice]:
    """A policy without prices to compare drafters by (fixed, adaptive) drafts with the last of the
    step's options: the head where the draft model and the head are both offered (`auto_both`
    drafts as `auto_head` does then). options: (drafter, unseen) of each who may draft this step."""
    return max(len(options) - 1, 0), policy.choose(options[-1][0] if options else "", options[-1][1] if options else 1)


class FixedK:
    def __init__(self, k: int):
        self.k = k

    def choose(self, drafter: str = "model", unseen: int = 1) -> Choice:
        return Choice(self.k)

    def choose_among(self, options: list[tuple[str, int]]) -> tuple[int, Choice]:
        return last_option(self, options)

    def update(self, choice: Choice, drafted: int, accepted: int, drafter: str = "model") -> None:
        pass


class AdaptiveK:
    """+2 after a fully accepted draft, -1 otherwise (transformers' "heuristic" schedule)."""

    def __init__(self, k: int, k_max: int):
        self.k, self.k_max = k, max(k, k_max)

    def choose(self, drafter: str = "model", unseen: int = 1) -> Choice:
        return Choice(self.k)

    def choose_among(self, options: list[tuple[str, int]]) -> tuple[int, Choice]:
        return last_option(self, options)

    def update(self, choice: Choice, drafted: int, accepted: int, drafter: str = "model") -> None:
        if drafted:
            self.k = min(self.k_max, self.k + 2) if accepted == drafted else max(1, self.k - 1)


class AcceptanceEstimate:
    """Per-token acceptance alpha: the mean of a Beta distribution over discounted counts.

    Evidence is counted as specdec.measure.metrics.estimate_alpha counts it: each accepted draft token is
    a success, a step that turned a draft token down one failure (a step ends at its first
    rejection, so the drafts after it say nothing).

    The prior: the drafter's recorded acceptance (`prior`, specdec.core.recorded_acceptance) with
    the weight of PRIOR_WEIGHT tokens, about one step's drafts, so the run's own evidence outweighs
    it after a step or two. A prior of 0.8 for every drafter made a run draft on text where drafting
    loses (the draft model on held-out chat is accepted about a third of the time) and paid for the
    lesson out of 64 tokens. All counts, the prior's included, fade by DECAY per step that drafted:
    the estimate follows the text as it changes (code, then prose) instead of averaging the whole
    run, and it can fall as low as the drafts deserve.
    """

    PRIOR_WEIGHT = 5.0  # tokens' worth of evidence the prior counts for
    DECAY = 0.9  # weight of the counts so far after each step that drafted: about the last 10 steps count

    def __init__(self, prior: float = 0.8):
        prior = min(max(prior, 0.0), 1.0)
        self.accepted, self.rejections = prior * self.PRIOR_WEIGHT, (1.0 - prior) * self.PRIOR_WEIGHT  # discounted successes and failures

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejections)

    def update(self, drafted: int, accepted: int) -> None:
        if not drafted:
            return  # nothing was checked: no evidence
        self.accepted = self.accepted * self.DECAY + accepted
        self.rejections = self.rejections * self.DECAY + (1.0 if accepted < drafted else 0.0)


def step_overhead_s(costs: Costs) -> float:
    """Seconds a drafting step spends outside its timed passes: the table's own figure where it
    carries one, else OVERHEAD_STEPS decode steps."""
    own = getattr(costs, "overhead_s", None)
    return float(own) if own is not None else OVERHEAD_STEPS * costs.target_pass_s(1)


def predicted_rate(k: int, alpha: float, draft_s: float, costs: Costs, first_s: float | None = None) -> float:
    """Predicted tokens per second of a step that drafts k tokens (k = 0: a plain decode step).
    first_s: the step's first draft pass where it costs more than draft_s (a catch-up)."""
    if k == 0:
        return 1.0 / costs.target_pass_s(1)
    drafting = (draft_s if first_s is None else first_s) + (k - 1) * draft_s
    return expected_tokens_per_pass(alpha, k) / (drafting + costs.target_pass_s(k + 1) + step_overhead_s(costs))


def best_choice(alpha: float, draft_s: float, costs: Costs, k_max: int, first_s: float | None = None, unseen: int = 1) -> Choice:
    """The K in 0..k_max with the highest predicted rate (the smaller K on a tie: drafting must pay)."""
    rates = [predicted_rate(k, alpha, draft_s, costs, first_s) for k in range(k_max + 1)]
    k = max(range(k_max + 1), key=lambda i: (rates[i], -i))
    why = pause_reason(alpha, draft_s, costs, first_s, unseen) if k == 0 else ""
    return Choice(k, rates[k], paused=k == 0, why=why)


def could_pay(alpha: float, draft_s: float, costs: Costs, k_max: int, first_s: float | None = None) -> bool:
    """Whether some K in 1..k_max would beat a plain step at these prices and acceptance alpha: the
    best choice there drafts."""
    return best_choice(alpha, draft_s, costs, k_max, first_s).k > 0


def pause_reason(alpha: float, draft_s: float, costs: Costs, first_s: float | None = None, unseen: int = 1) -> str:
    """Why a step drafts nothing, in the machine's own figures: c, alpha and the check's cost (and
    the catch-up, where the draft model would first read tokens it has not seen)."""
    step = costs.target_pass_s(1)
    catch_up = (f", and the draft model would first read the {unseen} tokens it has not seen, at {first_s / step:.2f}"
                if first_s is not None and unseen > 1 else "")
    first = first_s if first_s is not None and unseen <= 1 else draft_s  # what a step of K = 1 pays (the head's first draft)
    return (f"drafting would cost more than it saves here: c = {first / step:.2f}, \u03b1 = {alpha:.2f}, "
            f"checking 2 tokens costs {costs.target_pass_s(2) / step:.2f} decode steps{catch_up}")


class CostK:
    """K from the cost table and the acceptance so far (module docstring).

    Probes: a K = 0 step drafts nothing, so it teaches the estimate nothing, and a run that stopped
    drafting after a few bad steps would never find out that the text turned easy. So after
    PROBE_AFTER plain steps in a row the next step drafts one token (K = 1: the cheapest step
    that checks a draft). Each drafter keeps its own count: the steps another drafter took (prompt
    lookup on a match) neither count as its plain steps nor end its run of them, so lookup drafting
    on a spurious match now and then cannot keep the draft model's probe from coming. The wait
    doubles after each probe that does not bring drafting back (up to PROBE_MAX), so on text where
    drafting never pays the probes cost at most one K = 1 step in PROBE_AFTER, and ever fewer. A
    fixed schedule of step counts, not a random draw or a timer, keeps seeded runs reproducible. A probe is the one step the policy takes knowing it is predicted
    slower than plain decoding; its predicted_tok_s is the rate at K = 1, below the plain rate.
    A probe asks whether the text turned easy, so none is made where drafting would not pay at this
    step's prices even at the drafter's highest recorded acceptance on any kind of text (its ceiling
    in `ceilings`, at least its prior: `could_pay`). The int4 draft beside the w4a8 target on an
    Intel Xeon (c = 0.76 caught up, 1.9 after the 8 plain steps before a probe) does not pay even at
    the draft model's 0.89 on code, and its probes made a run that otherwise decoded plain 0.77x as
    fast (having the draft model read the prompt for them). The draft model's catch-up grows with
    every plain step, so a long pause can end its probes: asking the question with the draft model
    caught up instead was tried, and its probes' catch-ups cost more than they found
    (experiments/probe_clock_ab.py, docs/benchmarks.md).

    `drafter` ("model", "lookup" or "head"): who will draft this step. Prompt lookup costs no draft
    pass (draft_s 0) and has its own acceptance, so each drafter keeps its own estimate. Each other
    drafter's first draft of a step finds its weights pushed out of the caches by the target's pass,
    and is priced so: the draft model's at the table's draft_pass_s(unseen), its first pass over the
    `unseen` tokens it has not read (its catch-up), each further one at draft_s; the head's at
    head_first_s (7.2 ms against 5.5 ms for a further draft on an Intel Xeon whose last-level cache
    holds the head), each further one at head_s (specdec.measure.cost_table). Each drafter's
    estimate starts from `priors` (drafter -> alpha; default: the recorded acceptance of
    specdec.core.recorded_acceptance).

    `choose_among`: where a step may be drafted by more than one drafter (`auto_both`: the draft
    model and the head, where prompt lookup has no match), each one's best K is priced and the faster
    drafts. A step where neither pays is a plain step for each (its probe comes after its own plain
    steps); one that would have drafted but lost to the other is not.
    """

    PROBE_AFTER = 8  # plain steps in a row before a probe
    PROBE_MAX = 64  # the longest wait between probes

    def __init__(self, costs: Costs, k_max: int, priors: dict[str, float] | None = None):
        self.costs, self.k_max = costs, k_max
        priors = recorded_priors() if priors is None else priors  # drafter -> the acceptance its estimate starts from
        self.estimates = {d: AcceptanceEstimate(priors.get(d, FALLBACK)) for d in ("model", "lookup", "head")}
        self.ceilings = {d: max(priors.get(d, FALLBACK), recorded_highest(d)) for d in self.estimates}  # what a probe may find
        self.plain_run = dict.fromkeys(self.estimates, 0)  # drafter -> K = 0 steps it was asked for, in a row
        self.wait = dict.fromkeys(self.estimates, self.PROBE_AFTER)  # drafter -> its plain steps before its next probe
        self.asked: dict[str, bool] = {}  # drafter -> whether its best K was 0, of the drafters asked about the last step

    def draft_s(self, drafter: str) -> float:
        if drafter == "lookup":
            return 0.0
        seconds = self.costs.head_s if drafter == "head" else self.costs.draft_s
        if seconds is None:
            why = "its step was not timed" if drafter == "head" else "no draft model"
            raise ValueError(f"the cost policy needs the {drafter} drafter's pass cost, and the cost table has none ({why})")
        return float(seconds)

    def choose(self, drafter: str = "model", unseen: int = 1) -> Choice:
        return self.choose_among([(drafter, unseen)])[1]

    def choose_among(self, options: list[tuple[str, int]]) -> tuple[int, Choice]:
        """Who of the step's `options` ((drafter, unseen) of each who may draft it: prompt lookup alone
        where it matches, else the draft model and/or the head) drafts, and how many tokens: the
        drafter whose best K is predicted fastest, among those whose best K drafts; where none does,
        the first whose probe is due; else a plain step (the index of the last option, K = 0)."""
        choices = [self.best_for(drafter, unseen) for drafter, unseen in options]
        self.asked = {drafter: choice.k == 0 for (drafter, _), choice in zip(options, choices)}  # drafter -> paused this step
        drafting = [i for i, choice in enumerate(choices) if choice.k > 0]
        if drafting:
            i = max(drafting, key=lambda i: (choices[i].predicted_tok_s, -i))
            return i, choices[i]
        whys = []
        for i, ((drafter, unseen), best) in enumerate(zip(options, choices)):
            if not self.may_probe(drafter, unseen):
                ceiling = self.ceilings[drafter]
                whys.append(f"{best.why}; not even at \u03b1 = {ceiling:.2f}, its highest recorded, so no probe follows")
            elif self.plain_run[drafter] >= self.wait[drafter]:
                alpha, first_s = self.estimates[drafter].alpha, self.first_s(drafter, unseen)
                return i, Choice(1, predicted_rate(1, alpha, self.draft_s(drafter), self.costs, first_s), probe=True)
            else:
                whys.append(best.why)
        if len(whys) > 1:  # both the draft model and the head were asked
            whys = [f"with {DRAFTER_NAMES[drafter]}, {why}" for (drafter, _), why in zip(options, whys)]
        return len(options) - 1, replace(choices[-1], why="; ".join(whys))

    def may_probe(self, drafter: str, unseen: int) -> bool:
        """Whether drafting would pay at this step's prices at the drafter's ceiling: a probe asks
        whether the text turned that easy."""
        return could_pay(self.ceilings[drafter], self.draft_s(drafter), self.costs, self.k_max, self.first_s(drafter, unseen))

    def first_s(self, drafter: str, unseen: int) -> float | None:
        """What the drafter's first draft of a step costs where it is more than a further one (None: no more)."""
        if drafter == "head":  # the first draft of a step reads the head's weights from memory again
            return getattr(self.costs, "head_first_s", None)
        return self.costs.draft_pass_s(unseen) if drafter == "model" else None

    def best_for(self, drafter: str, unseen: int) -> Choice:
        """The drafter's best K at its estimate and this step's prices (K = 0: it would not pay)."""
        return best_choice(self.estimates[drafter].alpha, self.draft_s(drafter), self.costs, self.k_max,
                           self.first_s(drafter, unseen), unseen)

    def update(self, choice: Choice, drafted: int, accepted: int, drafter: str = "model") -> None:
        self.estimates[drafter].update(drafted, accepted)
        for other, paused in (self.asked or {drafter: choice.k == 0}).items():
            if other != drafter or choice.k == 0:  # asked, and did not draft: a plain step for it, unless it would have drafted
                self.plain_run[other] = self.plain_run[other] + 1 if paused else 0
        if choice.probe:
            self.plain_run[drafter], self.wait[drafter] = 0, min(2 * self.wait[drafter], self.PROBE_MAX)
        elif choice.k > 0:
            self.plain_run[drafter], self.wait[drafter] = 0, self.PROBE_AFTER


def make_policy(config, costs: Costs | None = None, head_prior: float | None = None):
    """The K policy of a run's settings (GenerationConfig): K = 0 every step when nothing drafts
    (plain decoding), else its k_policy's. The cost policy needs the cost table, and drafts at most
    one token less than its largest measured pass (no K is chosen from an extrapolation). Its
    estimates start from the recorded acceptance, the head's from `head_prior` where given (the
    head file's own validation figure: a retrained head brings its own)."""
    name = config.k_policy
    if not config.drafts:
        return FixedK(0)
    if name == "fixed":
        return FixedK(config.k)
    if name == "adaptive":
        return AdaptiveK(config.k, config.k_max)
    if name == "cost":
        if costs is None:
            raise ValueError("k_policy 'cost' needs a cost table (specdec.measure.cost_table.costs_for)")
        largest = max(getattr(costs, "sizes", (config.k_max + 1,)))
        priors = recorded_priors() if head_prior is None else {**recorded_priors(), "head": head_prior}
        return CostK(costs, max(1, min(config.k_max, largest - 1)), priors)
    raise ValueError(f"k_policy must be one of {', '.join(K_POLICIES)}, got {name!r}")
