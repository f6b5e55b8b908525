"""Hand-made StepEvents for the renderers, charts and metrics tests, and text that must come out escaped."""

from __future__ import annotations

from specdec.core.events import EOS_ACCEPTED, StepEvent, check_invariants

XSS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", '" onmouseover="alert(1)', "a & b'"]


def make_events(steps: list[tuple[list[str], int, str | None, str]]) -> list[StepEvent]:
    """steps: (drafted texts, accepted, last target text or None for an "eos" step, kind). Ids are made up;
    probabilities vary so tooltips differ."""
    events, total, t = [], 0, 0.0
    for i, (drafted_text, accepted, last, kind) in enumerate(steps):
        drafted = tuple(100 + j for j in range(len(drafted_text)))
        emitted_text = tuple(drafted_text[:accepted]) + (() if last is None else (last,))
        emitted = drafted[:accepted] + (() if last is None else (7,))
        total += len(emitted)
        t += 0.1
        events.append(
            StepEvent(
                step=i, drafted=drafted, accepted=accepted, emitted=emitted, kind=kind,
                p_target=tuple(0.5 for _ in drafted), p_draft=tuple(0.8 for _ in drafted),
                draft_s=0.01 * len(drafted), verify_s=0.05, total_tokens=total, elapsed_s=t,
                emitted_text=emitted_text, drafted_text=tuple(drafted_text),
                margins=tuple(0.25 for _ in emitted), k=len(drafted), greedy=False,
            )
        )
    check_invariants(events)
    return events


def event(step, drafted, accepted, kind, total, elapsed, draft_s=0.02, verify_s=0.1, drafter="model"):
    emitted = drafted[:accepted] + (() if kind == EOS_ACCEPTED else (99,))
    return StepEvent(step, drafted, accepted, emitted, kind, (0.5,) * len(drafted), (0.5,) * len(drafted),
                     draft_s, verify_s, total, elapsed, ("x",) * len(emitted), ("x",) * len(drafted), (1.0,) * len(emitted),
                     drafter=drafter if drafted else "")
