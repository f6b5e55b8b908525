"""Where a speculative run and a plain run of the same target first differ, and why."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specdec.core.events import StepEvent

# Below this top-2 logit margin the dense target's choice is a numerical tie, by the dtype of its
# logits: verifying K+1 positions in one pass sums in another order than K+1 single-token passes,
# which moves a logit by a few units in its last place.
# - fp32: a sum of n products reordered moves by at most n * 2^-24 * sum|w x| (Higham's gamma_n); for
#   the head's n = 1536 and sum|w x| about 10 at a logit near 20 that is 1e-3 (measured: 2-3e-5);
# - bf16: 8 significant bits, one step at a logit in [16, 32) is 2^-3 = 0.125; each of the two
#   top logits may land a step away in the other pass (0.25), and the bf16 rounding of every
#   layer's activations moves them by as much again: 0.5, four steps;
# - fp16: 11 bits, a step 2^-6 at [16, 32); 0.1 is about six.
TIE_MARGIN = {"fp32": 1e-3, "bf16": 0.5, "fp16": 0.1}

# Kernels whose products take bf16 activations on a CPU whatever the pair's dtype
# (specdec/kernels/target_kernels.py ACTIVATION): their logits carry bf16's rounding.
BF16_ACTIVATIONS = frozenset({"int8", "q4k"})


def tie_bound(kernel: str | None = None, dtype_name: str = "fp32", device: str = "cpu") -> float | None:
    """The largest top-2 margin at which speculative and plain output on target kernel `kernel` may
    part by rounding alone (a tie), in a pair of `dtype_name` on `device`.

    None for a batch-invariant kernel (specdec/kernels/batch_invariant.py: w8a8, w4a8, int8, and the dense
    target in fp32, on a CPU that runs the kernel library): its check gives every row a one-token pass's
    bits, so speculative and plain output are the same tokens, ties included (equal logits pick the
    same argmax), and no margin makes a departure a tie: any departure is a fault. Otherwise the
    dense kernel takes its dtype's TIE_MARGIN, int8 and q4k at least bf16's; an unknown kernel (a
    real engine's) its dtype's."""
    from specdec.kernels.batch_invariant import invariant_kernel

    if kernel is not None and invariant_kernel(kernel, dtype_name, device):
        return None
    bound = TIE_MARGIN.get(dtype_name, TIE_MARGIN["fp32"])
    return max(bound, TIE_MARGIN["bf16"]) if kernel in BF16_ACTIVATIONS else bound


@dataclass(frozen=True)
class Difference:
    index: int  # position among the new tokens
    spec_token: int | None  # None when that run ended first
    plain_token: int | None
    spec_text: str
    plain_text: str
    margin: float | None  # the kernel's own top-1 minus top-2 logit there (the smaller of the two runs; None: not reported)
    is_tie: bool | None  # margin small enough to be rounding, not a bug (None: no margin to judge by)
    kernel: str | None = None  # the target kernel both runs ran: its margins and its bound judge the departure
    bound: float | None = None  # the kernel's tie bound (tie_bound); None with is_tie False: a batch-invariant kernel

    def as_dict(self) -> dict:
        return asdict(self)


def _flatten(events: list[StepEvent]) -> list[tuple[int, str, float | None]]:
    return [tok for e in events for tok in zip(e.emitted, e.emitted_text, e.margins or (None,) * len(e.emitted))]


def first_difference(spec: list[StepEvent], plain: list[StepEvent], dtype_name: str = "fp32", kernel: str | None = None,
                     device: str = "cpu") -> Difference | None:
    """None when both runs emitted the same tokens; else where they part, judged by the margins both
    runs' kernel reported there and its tie bound (tie_bound: none for a batch-invariant kernel)."""
    a, b = _flatten(spec), _flatten(plain)
    bound = tie_bound(kernel, dtype_name, device)
    for i in range(max(len(a), len(b))):
        ta = a[i] if i < len(a) else None
        tb = b[i] if i < len(b) else None
        if ta is not None and tb is not None and ta[0] == tb[0]:
            continue
        margins = [t[2] for t in (ta, tb) if t is not None and t[2] is not None]
        margin = min(margins) if margins else None
        return Difference(
            index=i,
            spec_token=ta[0] if ta else None,
            plain_token=tb[0] if tb else None,
            spec_text=ta[1] if ta else "",
            plain_text=tb[1] if tb else "",
            margin=margin,
            is_tie=None if margin is None else is_tie(margin, bound),
            kernel=kernel,
            bound=bound,
        )
    return None


def is_tie(margin: float, bound: float | None) -> bool:
    """A margin within the kernel's tie bound: the top two equal, or closer than its rounding can
    tell apart. With no bound (a batch-invariant kernel) nothing is a tie."""
    return bound is not None and margin <= bound


def tie_verdict(d: Difference) -> str:
    """One line on a departure, in the kernel's own terms: its top-2 margin there and what that makes it."""
    if d.margin is None:
        return "no top-2 margin reported there"
    where = f"the {d.kernel} kernel's top-2 logit margin {d.margin:.4f}" if d.kernel else f"the target's top-2 logit margin {d.margin:.4f}"
    if d.bound is None:
        return (f"{where}: NOT a tie; this kernel is batch-invariant (a check gives every row a one-token pass's "
                "bits), so its speculative output must equal plain output and any departure is a fault")
    if d.is_tie:
        return f"{where}: a numerical tie (within its bound {d.bound:g})"
    return f"{where}: NOT a tie (above its bound {d.bound:g})"


def agreement(a: list[int], b: list[int], n: int = 64) -> int:
    """How many of the first n positions hold the same token in both outputs."""
    return sum(x == y for x, y in zip(a[:n], b[:n]))


@dataclass(frozen=True)
class Departure:
    """Where a lossy run (plain decoding with a quantized target) leaves the exact target's output."""

    difference: Difference | None  # None: the first `compared` tokens are all the same
    agree: int  # positions among the first `compared` holding the same token in both
    compared: int  # min(64, tokens of the exact run)


def departure(lossy: list[StepEvent], exact: list[StepEvent], dtype_name: str = "fp32", n: int = 64) -> Departure:
    a = [t for e in lossy for t in e.emitted]
    b = [t for e in exact for t in e.emitted]
    return Departure(first_difference(lossy, exact, dtype_name), agreement(a, b, n), min(n, len(b)))
