"""Which exact configuration is fastest on this machine, predicted from its own pass costs.

Each candidate is a target kernel with a drafter: plain steps, the draft model as one of its
variants, or the trained head. Its predicted tokens/s is the cost K policy's own prediction
(specdec.core.k_policy.best_choice: the best K in 0..k_max at the measured costs, the verify pass and
a step's overhead priced in) at the drafter's recorded acceptance (specdec.core.recorded_acceptance).
K = 0 is one of the K it weighs, so no candidate is predicted slower than plain steps on its kernel,
and a drafter that does not pay there is listed at the plain rate, with the reason.

The choice is the predicted fastest (on a tie: plain steps before a drafter, then the cheaper
draft). The run starts on it with the cost K policy, so what the prediction says is what each step
does: where the model drafts, the `auto` drafter (prompt lookup where the prompt repeats, a free
draft the policy prices at c = 0, else the draft model); where the head drafts, `auto_both` (the
same, with the head or the draft model, whichever the policy prices faster each step); where no
drafter pays, plain steps (lookup still drafts where it pays). Pure: the tables come in measured
(specdec.serving.defaults_here measures and caches them); a Measured is written to and read from JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specdec.core.k_policy import best_choice
from specdec.core.recorded_acceptance import recorded
from specdec.kernels.machine_defaults import MachineDefaults
from specdec.measure.passcost import DraftCost, PassCosts

FORMAT = "specdec-defaults"
VERSION = 4  # 4: the draft model's first pass of a step priced apart; 3: the head's; 2: the kernels' tables time the target alone
RUNNER = "eager"  # what is measured and started on: compiling pays back only after minutes per process
K_MAX = 15  # the largest K weighed (a table of passes up to 16 tokens)


@dataclass(frozen=True)
class Candidate:
    target_kernel: str
    drafter: str  # "none" (plain steps), "model" (the draft model as draft_variant) or "head"
    draft_variant: str  # "" where the draft model does not draft
    decode_step_s: float  # one target pass over 1 token on this kernel
    check_s: float  # one target pass over K+1 tokens at the chosen K (the decode step at K = 0)
    draft_s: float | None  # one draft step of this drafter (None: plain steps)
    alpha: float | None  # the acceptance the drafter was predicted at (None: plain steps)
    k: int  # the K the cost policy predicts best (0: drafting does not pay)
    tok_s: float  # predicted tokens/s
    why: str = ""  # K = 0 for a drafter: why drafting does not pay here
    first_s: float | None = None  # a step's first draft where it costs more than draft_s (after the target's pass emptied the caches)

    @property
    def c(self) -> float | None:
        """A drafted token's cost in decode steps, at the chosen K where the first draft of a step costs more."""
        if self.draft_s is None:
            return None
        k = max(self.k, 1)
        first = self.draft_s if self.first_s is None else self.first_s
        return (first + (k - 1) * self.draft_s) / k / self.decode_step_s

    @property
    def name(self) -> str:
        drafter = {"none": "plain steps", "head": "the trained head"}.get(self.drafter, f"draft {self.draft_variant}")
        return f"target {self.target_kernel}, {drafter}"


def predict(kernel: str, costs: PassCosts, drafter: str = "none", variant: str = "", draft_s: float | None = None,
            alpha: float | None = None, first_s: float | None = None) -> Candidate:
    """One candidate's predicted tokens/s (drafter "none": plain steps on `kernel`; first_s: the
    first draft of a step, where it costs more than draft_s)."""
    largest = max(1, min(K_MAX, max(costs.sizes) - 1))
    if drafter == "none":
        return Candidate(kernel, "none", "", costs.decode_step_s, costs.decode_step_s, None, None, 0, 1.0 / costs.decode_step_s)
    choice = best_choice(alpha, draft_s, costs, largest, first_s)
    return Candidate(kernel, drafter, variant, costs.decode_step_s, costs.target_pass_s(choice.k + 1), draft_s, alpha,
                     choice.k, choice.predicted_tok_s, choice.why, first_s)


def candidates(tables: dict[str, PassCosts], drafts: dict[str, DraftCost], heads: dict[str, DraftCost], kind: str | None = None,
               head_alpha: float | None = None) -> list[Candidate]:
    """Every candidate: per target kernel (tables: kernel -> its cost table), plain steps, the draft
    model as each variant (drafts: variant -> its one-token passes' cost) and the head (heads:
    kernel -> its drafts' cost), the head at `head_alpha` where given (its file's own held-out figure, as its runs
    start from: specdec.kernels.head_offer.validation_prior), else at its recorded acceptance."""
    model = recorded("model", kind).alpha
    head = head_alpha if head_alpha is not None else recorded("head", kind).alpha
    out = []
    for kernel, costs in tables.items():
        out.append(predict(kernel, costs))
        out += [predict(kernel, costs, "model", variant, cost.step_s, model, cost.first_s) for variant, cost in drafts.items()]
        if kernel in heads:
            out.append(predict(kernel, costs, "head", "", heads[kernel].step_s, head, heads[kernel].first_s))
    return out


def fastest(found: list[Candidate]) -> Candidate:
    """The predicted fastest; on a tie plain steps, then the cheaper draft (drafting must pay)."""
    return max(found, key=lambda c: (round(c.tok_s, 9), c.k == 0, -(c.draft_s or 0.0)))


@dataclass(frozen=True)
class Measured:
    """What was measured on this machine for one pair, and what it chose."""

    pair: str
    machine: str  # the cost tables' machine folder (specdec.measure.cost_table.machine_folder)
    dtype: str
    candidates: tuple[Candidate, ...]
    chosen: Candidate
    skipped: dict[str, str] = field(default_factory=dict)  # what was not measured -> why
    seconds: float = 0.0  # how long the measurement took (0: read from the cache)
    default_variant: str = "dense"  # the draft variant to start on where no variant was measured (the recorded table's)
    head: str = ""  # the tensors digest of the head file the head's candidates were predicted for ("" none)

    @property
    def plain_here(self) -> Candidate:
        """Plain steps on the chosen kernel: what the choice is compared with."""
        return next(c for c in self.candidates if c.drafter == "none" and c.target_kernel == self.chosen.target_kernel)

    @property
    def models_here(self) -> list[Candidate]:
        """The draft model's candidates on the chosen kernel, one per draft variant measured."""
        return [c for c in self.candidates if c.drafter == "model" and c.target_kernel == self.chosen.target_kernel]

    @property
    def variant(self) -> str:
        """The draft variant to start on: the chosen one, else the one predicted best on the chosen kernel."""
        if self.chosen.draft_variant:
            return self.chosen.draft_variant
        models = self.models_here
        return fastest(models).draft_variant if models else self.default_variant

    @property
    def model_measured(self) -> bool:
        """Whether the draft model was measured beside the chosen kernel (it may stand by the head)."""
        return bool(self.models_here)

    def defaults(self) -> MachineDefaults:
        """Prompt lookup first, where it matches. Where the head is chosen and the draft model was
        measured too, the draft model stands by (`auto_both`): the cost K policy drafts each step with
        whichever it prices faster, so text the head does not know (a translation, where it is
        accepted on 1 draft in 12 and the draft model on 35 in 42) is drafted by the draft model."""
        if self.chosen.drafter == "head":
            drafter = "auto_both" if self.model_measured else "auto_head"
        else:
            drafter = "auto"
        return MachineDefaults(self.chosen.target_kernel, self.variant, drafter, RUNNER, "cost", self.line)

    @property
    def line(self) -> str:
        """One line: what was chosen and the figures that chose it (plain text)."""
        c, plain = self.chosen, self.plain_here
        ratio = c.tok_s / plain.tok_s
        if c.k == 0:
            here = [x for x in self.candidates if x.drafter != "none" and x.target_kernel == c.target_kernel]
            drafting = min(here, key=lambda x: x.draft_s).why if here else "no drafter was measured yet"  # the cheapest one's reason
            how = f"plain steps ({drafting})"
        else:
            how = f"{'the trained head' if c.drafter == 'head' else 'draft ' + c.draft_variant}, K = {c.k}, c = {c.c:.2f}, \u03b1 = {c.alpha:.2f}"
            if c.drafter == "head" and self.model_measured:  # auto_both: the draft model drafts where it is priced faster
                how += f" (draft {self.variant} where it is priced faster)"
        return (f"measured on this machine: target {c.target_kernel} ({1000 * c.decode_step_s:.0f} ms a token), {how}: "
                f"predicted {c.tok_s:.1f} tok/s, {ratio:.2f}x plain {c.target_kernel}")

    def as_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "pair": self.pair, "machine": self.machine, "dtype": self.dtype,
                "candidates": [asdict(c) for c in self.candidates], "chosen": asdict(self.chosen),
                "skipped": dict(self.skipped), "seconds": self.seconds, "default_variant": self.default_variant, "head": self.head,
                "line": self.line}


def from_json(data: dict) -> Measured | None:
    """A Measured read back, or None when the data cannot be trusted (then it is measured again)."""
    try:
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            return None
        found = tuple(Candidate(**c) for c in data["candidates"])
        chosen = Candidate(**data["chosen"])
        if not found or chosen not in found or not all(c.tok_s > 0 and c.decode_step_s > 0 for c in found):
            return None
        return Measured(str(data["pair"]), str(data["machine"]), str(data["dtype"]), found, chosen,
                        {str(k): str(v) for k, v in data.get("skipped", {}).items()}, 0.0,
                        str(data.get("default_variant", "dense")), str(data.get("head", "")))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
