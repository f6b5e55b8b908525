"""Where a speculative run and a plain run of the same target first differ, and why."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specdec.core.events import StepEvent

# Below this top-2 logit margin the target's choice is a numerical tie: verifying K+1 positions in
# one pass sums in another order than K+1 single-token passes, which moves logits by a few units
# in the last place (bf16 keeps 8 bits of mantissa: about 0.06 at a logit of 16).
TIE_MARGIN = {"fp32": 1e-3, "bf16": 0.5, "fp16": 0.1}


@dataclass(frozen=True)
class Difference:
    index: int  # position among the new tokens
    spec_token: int | None  # None when that run ended first
    plain_token: int | None
    spec_text: str
    plain_text: str
    margin: float | None  # the target's top-1 minus top-2 logit there (the smaller of the two runs; None: not reported)
    is_tie: bool | None  # margin small enough to be rounding, not a bug (None: no margin to judge by)

    def as_dict(self) -> dict:
        return asdict(self)


def _flatten(events: list[StepEvent]) -> list[tuple[int, str, float | None]]:
    return [tok for e in events for tok in zip(e.emitted, e.emitted_text, e.margins or (None,) * len(e.emitted))]


def first_difference(spec: list[StepEvent], plain: list[StepEvent], dtype_name: str = "fp32") -> Difference | None:
    """None when both runs emitted the same tokens."""
    a, b = _flatten(spec), _flatten(plain)
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
            is_tie=None if margin is None else margin < TIE_MARGIN.get(dtype_name, 1e-3),
        )
    return None


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
