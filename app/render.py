"""StepEvents -> HTML strings for the page. Every piece of model text goes through html.escape.

Token spans carry one class each (tok-accepted, tok-rejected, tok-correction, tok-bonus, tok-plain);
assets/style.css gives each class its one colour.
"""

from __future__ import annotations

from html import escape
from typing import Iterable

from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, PLAIN, StepEvent
from specdec.measure.metrics import RunMetrics

# Token class -> (legend name, what it means); the meaning opens each token's tooltip.
LABELS = {
    "accepted": ("accepted draft", "accepted draft token"),
    "rejected": ("rejected draft", "rejected draft token (not part of the output)"),
    "correction": ("correction", "target token: correction (the target's choice after a rejection)"),
    "bonus": ("bonus", "target token: bonus (every draft token was accepted)"),
    "plain": ("plain decoding", "target token: plain (nothing was drafted this step)"),
}
# Event kind of the last emitted token -> token class. EOS_ACCEPTED has no target token: its last
# emitted token is an accepted draft, rendered as such.
KIND_CLASS = {CORRECTION: "correction", BONUS: "bonus", PLAIN: "plain", EOS_ACCEPTED: "accepted"}

NEWLINE_MARK = "\u21b5"  # shown in place of a newline inside a rejected token, so it cannot move the real text


def _span(cls: str, text: str, title: str, step: int | None = None) -> str:
    """One token. `step` (an int, never model text) lets a click open that step in the step panel."""
    if not text:  # e.g. an end-of-sequence token that decodes to "": nothing to see
        return ""
    at = f' data-step="{int(step)}"' if step is not None else ""
    return f'<span class="tok tok-{cls}"{at} title="{escape(title, quote=True)}">{escape(text, quote=True)}</span>'


def _draft_title(event: StepEvent, i: int, cls: str) -> str:
    """Tooltip of drafted token i: its probabilities under both models and its chance of acceptance."""
    if event.p_target is None or event.p_draft is None:
        return f"{LABELS[cls][1]}\n{event.engine} does not report p_target and p_draft"
    p_t, p_d, a = event.p_target[i], event.p_draft[i], event.accept_probs[i]
    rule = (
        "greedy: kept only while it is the target's top choice"
        if event.greedy
        else f"acceptance probability min(1, p_target/p_draft) = {a:.4f}"
    )
    return f"{LABELS[cls][1]}\np_target {p_t:.4f} · p_draft {p_d:.4f}\n{rule}"


def _target_title(event: StepEvent) -> str:
    title = LABELS[KIND_CLASS[event.kind]][1]
    if event.margins is not None:
        title += f"\ntarget top-1 minus top-2 logit {event.margins[-1]:.4f}"
    if event.paused:
        title += (f"\nnothing drafted: {event.paused_why}" if event.paused_why else
                  "\nnothing drafted: at this machine's pass costs and the acceptance so far, "
                  "drafting would make fewer tokens/s than a plain step")
    elif event.withdrawn_why and not event.drafted:
        title += f"\nnothing drafted: {event.withdrawn_why}"
    return title


def unseen_chip(n: int, engine: str, step: int | None = None) -> str:
    """Rejected drafts the engine counted but did not send: one struck chip with their count, "×3"."""
    title = (f"{LABELS['rejected'][1]}\n{engine} drafted {n} more token{'s' if n != 1 else ''} here and rejected "
             f"{'them' if n != 1 else 'it'} without sending {'their' if n != 1 else 'its'} text")
    return _span("rejected tok-unseen", f"\u00d7{int(n)}", title, step)


def render_event(event: StepEvent, show_rejected: bool = True) -> str:
    """The spans of one step: accepted drafts, rejected drafts (where they were proposed), then the target token."""
    n_acc, step = event.accepted, event.step
    parts = [_span("accepted", event.emitted_text[i], _draft_title(event, i, "accepted"), step) for i in range(n_acc)]
    if show_rejected:
        for i in range(n_acc, len(event.drafted)):
            text = event.drafted_text[i].replace("\r\n", NEWLINE_MARK).replace("\n", NEWLINE_MARK)
            parts.append(_span("rejected", text, _draft_title(event, i, "rejected"), step))
        if event.unseen_rejected:
            parts.append(unseen_chip(event.unseen_rejected, event.engine, step))
    if event.kind != EOS_ACCEPTED:  # an "eos" step has no target token of its own
        parts.append(_span(KIND_CLASS[event.kind], event.emitted_text[-1], _target_title(event), step))
    return "".join(parts)


def render_spans(events: Iterable[StepEvent], show_rejected: bool = True) -> str:
    """All steps' spans, unwrapped: the value of a token pane (its template adds the block around them)."""
    return "".join(render_event(e, show_rejected) for e in events)


def render_pending(pieces) -> str:
    """Text a remote engine sent before saying how its steps went (vLLM does at the end): uncoloured
    spans, escaped, replaced by the coloured steps when they arrive."""
    title = "the engine has not reported this token's step yet (it does when its stream ends)"
    return "".join(_span("pending", piece, title) for piece in pieces)


def render_tokens(events: Iterable[StepEvent], show_rejected: bool = True) -> str:
    """All steps as one pre-wrapped block of coloured spans."""
    return f'<div class="tokens">{render_spans(events, show_rejected)}</div>'


def render_status(line: str, details: str = "") -> str:
    """The status line above the panes (HTML, escaped): `line` on one line, and `details` (where
    the pair comes from, how faithful its kernel is, which head file drafts) behind a closed
    disclosure, so that the line does not wrap and push the panes below the first screen."""
    if not details:
        return f'<p class="status-line">{escape(line, quote=False)}</p>'
    return (f'<details class="status-line"><summary>{escape(line, quote=False)}</summary>'
            f"<p>{escape(details, quote=False)}</p></details>")


def render_legend() -> str:
    items = "".join(
        f'<span class="tok tok-{cls}" title="{escape(meaning, quote=True)}">{escape(name)}</span>'
        for cls, (name, meaning) in LABELS.items()
    )
    return f'<div class="legend">{items}</div>'


def _stat(label: str, value: str, help_text: str) -> str:
    return (
        f'<div class="stat" title="{escape(help_text, quote=True)}">'
        f'<span class="stat-value">{escape(value)}</span><span class="stat-label">{escape(label)}</span></div>'
    )


def render_stats(spec: RunMetrics, plain: RunMetrics | None = None, badge: str | None = None, *, plain_done: bool = True) -> str:
    """A row of numbers. Everything comes from RunMetrics; only the speedup and passes saved compare two runs.
    `plain_done`: the plain run has ended (until then "target passes saved" would count a half run).
    `badge` is HTML from render_badge, placed at the end of the row."""
    dash = "\u2014"
    has_plain = plain is not None and plain.target_passes > 0
    speedup = spec.tokens_per_s / plain.tokens_per_s if has_plain and plain.tokens_per_s > 0 else None
    drafted = spec.drafted > 0
    decode_from = f"a plain decode step (from {spec.decode_step_from})" if spec.decode_step_s else "a plain decode step (not known yet)"
    stats = [
        _stat("speculative tok/s", f"{spec.tokens_per_s:.1f}", "new tokens per second, speculative decoding: the engine's own time, prompt processing and page drawing excluded"),
        _stat("plain tok/s", f"{plain.tokens_per_s:.1f}" if has_plain else dash, "new tokens per second, plain decoding"),
        _stat("speedup", f"{speedup:.2f}\u00d7" if speedup else dash, "speculative tok/s divided by plain tok/s"),
        _stat(
            "per-token acceptance \u03b1",
            f"{spec.alpha:.2f}" if drafted else dash,
            f"accepted / (accepted + steps that rejected a draft token) = {spec.accepted} / "
            f"({spec.accepted} + {spec.rejections}): the chance that one draft token is kept, as Leviathan et al. 2023 model it",
        ),
        _stat(
            "drafts accepted",
            f"{spec.accepted_share:.0%}" if drafted else dash,
            f"{spec.accepted} of {spec.drafted} draft tokens accepted (accepted / drafted). Lower than \u03b1: "
            "the drafts after a rejection are never checked, yet count as not accepted",
        ),
        _stat(
            "tokens / target pass",
            f"{spec.tokens_per_pass:.2f}",
            f"measured; independent acceptance at \u03b1 would give (1 - \u03b1^(K+1)) / (1 - \u03b1) = "
            f"{spec.expected_tokens_per_pass:.2f}. Plain decoding makes exactly 1 per pass",
        ),
        _stat(
            "target passes saved",
            str(plain.target_passes - spec.target_passes) if has_plain and plain_done else dash,
            "plain decoding's target forward passes minus speculative decoding's (shown when both runs have ended)",
        ),
        _stat("cost ratio c", _c_value(spec), f"one draft pass / {decode_from}. " + _c_help(spec)),
        _stat(
            "verify cost",
            f"{spec.verify_cost:.2f}" if drafted and spec.verify_cost is not None else dash,
            f"one target pass over K+1 tokens / {decode_from}: about 1 where decoding is memory-bound "
            "(the weights are read once per pass), more where the pass is compute-bound",
        ),
    ]
    return f'<div class="stats">{"".join(stats)}{badge or ""}</div>'


def _c_value(m: RunMetrics) -> str:
    if m.cost_ratio_c is None or not m.drafted:
        return "\u2014"
    if m.lookup_steps and not m.model_steps and not m.head_steps:  # lookup alone
        return "0 (lookup)"
    if m.model_steps and (m.lookup_steps or m.head_steps):  # a blend: the draft model's own figure beside it
        return f"{m.cost_ratio_c:.3f} (model {m.draft_model_c:.3f})"
    return f"{m.cost_ratio_c:.3f}"


def _c_help(m: RunMetrics) -> str:
    if m.lookup_steps and not m.model_steps and not m.head_steps:
        return "Prompt lookup costs no draft pass: it copies tokens from the prompt, so c is about 0."
    if m.model_steps and m.head_steps:
        lookup = [f"{m.lookup_steps} by prompt lookup (no draft pass)"] if m.lookup_steps else []
        by = ", ".join([*lookup, f"{m.head_steps} by the trained head", f"{m.model_steps} by the draft model"])
        return (f"Drafter auto (head or draft model): steps drafted {by}, each by the drafter the cost K policy "
                "priced faster; the first figure blends them, the second is the draft model's own.")
    if m.model_steps and m.lookup_steps:
        return (f"Drafter auto: {m.lookup_steps} steps by prompt lookup (no draft pass) and {m.model_steps} by the "
                "draft model; the first figure blends both, the second is the draft model's own.")
    if m.head_steps and m.lookup_steps:
        return (f"{m.lookup_steps} steps by prompt lookup (no draft pass) and {m.head_steps} by the trained head: "
                "the figure blends both, so the head's own c is higher.")
    return "A draft pass is the drafting time per drafted token."


def render_badge(
    *,
    identical: bool,
    index: int | None = None,
    spec_text: str | None = None,
    plain_text: str | None = None,
    margin: float | None = None,
    is_tie: bool | None = None,
    verdict: str | None = None,
) -> str:
    """Whether the speculative output equals plain decoding, and if not, where and why it may differ
    (verdict: the kernel's margin there judged by its own tie bound, specdec.measure.compare.tie_verdict)."""
    if identical:
        return '<div class="badge badge-identical">identical to plain decoding</div>'

    def shown(text: str | None) -> str:
        return "(end of output)" if text is None else repr(text)  # repr makes newlines and spaces visible

    where = f"token {index}" if index is not None else "an unknown token"
    msg = f"differs at {where}: spec {shown(spec_text)} vs plain {shown(plain_text)}"
    if verdict is not None:
        msg += f"; {verdict}"
    elif margin is not None:
        msg += f", target top-2 logit margin {margin:.4f}"
        if is_tie is not None:
            msg += ": a numerical tie" if is_tie else ": not a numerical tie"
    return f'<div class="badge badge-differs">{escape(msg)}</div>'


def render_departure(tokens_per_s: float, identical: bool, index: int | None = None, lossy_text: str | None = None,
                     exact_text: str | None = None, agree: int = 0, compared: int = 0) -> str:
    """The lossy lane's verdict: its speed, and where its text leaves the exact target's."""
    speed = f"int4 target: {tokens_per_s:.1f} tok/s"
    if identical:
        return f'<div class="badge">{escape(speed)}, the same {compared} tokens as the exact target</div>'
    shown = "(end of output)" if lossy_text is None else repr(lossy_text)
    wanted = "(end of output)" if exact_text is None else repr(exact_text)
    msg = (f"{speed}, departs from the exact target at token {index}: {shown} instead of {wanted}; "
           f"{agree} of the first {compared} tokens agree")
    return f'<div class="badge badge-differs">{escape(msg)}</div>'
