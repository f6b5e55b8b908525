"""Step through one step: the per-session held run, and the panel that explains a step
(specdec.core.detail.explain gives the verdicts; this module lays them out). Handlers: app.stepping."""

from __future__ import annotations

import threading
from html import escape

from specdec.engines import choice
from specdec.core.detail import ACCEPTED, DISCARDED, REJECTED, StepExplanation
from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, PLAIN

from . import palette
from .render import NEWLINE_MARK, unseen_chip

EMPTY = ('<div class="step-panel"><p class="caption">Press <b>Step</b> to run one speculative step and see why '
         "each draft token was kept or rejected, or click any token in the output to open its step. "
         "<b>Run to end</b> finishes the run, then runs plain decoding beside it.</p></div>")

ZERO_GPU = ('<div class="step-panel"><p class="caption">Stepping needs a process that holds the run between '
            "clicks, and on ZeroGPU every GPU call runs in a fresh worker, so Step is off here. Click any token in "
            "the output to see what its step decided.</p></div>")

# The token pane reports a click on a token with the step it belongs to (its data-step attribute).
TOKEN_CLICK_JS = """
element.addEventListener('click', (e) => {
  const tok = e.target.closest('.tok[data-step]');
  if (tok) trigger('click', {step: Number(tok.dataset.step)});
});
"""


class StepSession:
    """Per session (gr.State): the stepped run held between clicks, and its recorded details.

    Mutated in place by the handlers; a deep copy (Gradio's per-session copy of the initial value)
    is a fresh one. It is closed when another run starts, when the settings change, and when the
    session ends (gr.State's delete_callback), which lets the run's caches go."""

    def __init__(self):
        self.lock = threading.Lock()  # one handler at a time advances the run
        self.reset()

    def reset(self) -> None:
        self.decoding = None  # the held run, built detailed (its `details`: specdec.core.detail)
        self.events = None  # its iterator: next() is one step
        self.view = None  # app.view.RunView of the held run
        self.pair = self.prompt_ids = None  # the pair and prompt ids it runs on
        self.key = None  # the settings it was started with
        self.ended = False  # the speculative run has no more steps

    def __deepcopy__(self, memo):
        return StepSession()

    def close(self) -> None:
        """Drop the held run (its generator is closed, so nothing keeps its caches alive)."""
        events = self.events
        if events is not None:
            try:
                events.close()
            except ValueError:  # it is running in another thread right now; it is dropped all the same
                pass
        self.reset()

    def detail(self, step: int, events: list):
        """The recorded detail of `step` if `events` (what the page shows) is the held run."""
        view, decoding = self.view, self.decoding
        if view is None or decoding is None or not 0 <= step < min(len(decoding.details), len(events), len(view.spec)):
            return None
        return decoding.details[step] if view.spec[step] == events[step] else None


# --- the panel ------------------------------------------------------------------------------------


def shown(text: str) -> str:
    """Model text, escaped, with a newline made visible (it would break the table row)."""
    return escape(text.replace("\r\n", NEWLINE_MARK).replace("\n", NEWLINE_MARK), quote=True)


def _tok(cls: str, text: str) -> str:
    return f'<span class="tok tok-{cls}">{shown(text) or "&nbsp;"}</span>'


VERDICT_WORDS = {ACCEPTED: "kept", REJECTED: "rejected", DISCARDED: "discarded"}
VERDICT_CLASS = {ACCEPTED: "accepted", REJECTED: "rejected", DISCARDED: "rejected"}
DRAFTER_WORDS = {"model": "the draft model", "lookup": "prompt lookup", "head": "the trained head"}


def render_panel(x: StepExplanation | None) -> str:
    if x is None:
        return EMPTY
    reports_p_q = choice.of_events(x.engine).reports_p_q  # else only counts: say what stays blank
    parts = [f'<div class="step-panel" data-step="{x.step}"><div class="step-title">{escape(_headline(x))}</div>']
    if x.rows or x.unseen_rejected:
        parts.append(_table(x))
    parts.append(f'<p class="step-token">{_token_sentence(x)}</p>')
    if x.detail is not None and x.kind in (CORRECTION, BONUS):
        parts.append(_distributions(x))
    elif x.detail is None and x.kind in (CORRECTION, BONUS) and reports_p_q:
        parts.append('<p class="caption">The distributions and the draws u are recorded only for a stepped run: '
                     "press <b>Step</b> (or <b>Run to end</b>) to see p_target, p_draft and the residual here.</p>")
    parts.append(f'<p class="caption">{_rule_caption(x)}</p>')
    if not reports_p_q:
        parts.append(f'<p class="caption unreported">{escape(unreported(x.engine))}</p>')
    return "".join(parts) + "</div>"


def unreported(engine: str) -> str:
    """What a step of a real engine read over HTTP cannot show: the engine counts its drafts but does not send them."""
    return (f"{engine} reports how many tokens it drafted and how many it kept, not the rejected draft tokens' text, "
            "not p_target or p_draft, and not the draft and verify seconds apart; those stay blank here.")


def _headline(x: StepExplanation) -> str:
    head = f"Step {x.step} (target pass {x.step + 1}): "
    n = len(x.rows) + x.unseen_rejected
    if not n and x.paused_why:
        return head + f"nothing was drafted: the K policy chose a plain step, since {x.paused_why}."
    if not n and x.withdrawn_why:
        return head + f"nothing was drafted: {x.withdrawn_why}. The target made one token, as plain decoding would."
    if not n:
        return head + ("nothing was drafted (prompt lookup found no match, or plain decoding); "
                       "the target made one token, as plain decoding would.")
    who = DRAFTER_WORDS.get(x.drafter, "the drafter")
    tail = {CORRECTION: "then added its correction", BONUS: "then added a bonus token",
            EOS_ACCEPTED: "and an accepted draft token ended the run"}.get(x.kind, "")
    cut = f" (then stopped: {x.withdrawn_why})" if x.withdrawn_why else ""
    return f"{head}{who} proposed {n} token{'s' if n != 1 else ''}{cut}; the target kept {x.accepted}, {tail}."


def _table(x: StepExplanation) -> str:
    head = (
        "<tr><th>#</th><th>draft token</th>"
        '<th title="the draft\'s probability of the token it proposed (1 for prompt lookup)">p_draft</th>'
        '<th title="the target\'s probability of the same token, from its one pass over all the drafts">p_target</th>'
        '<th title="the chance the sampling rule keeps the token">min(1, p_target / p_draft)</th>'
        "<th>deciding evidence</th><th>verdict</th></tr>"
    )
    rows = []
    for r in x.rows:
        cls = VERDICT_CLASS[r.verdict]
        rows.append(
            f'<tr class="row-{r.verdict}" data-verdict="{r.verdict}"><td class="num">{r.index + 1}</td>'
            f"<td>{_tok(cls, r.text)}</td><td class=\"num\">{_p(r.p_draft)}</td><td class=\"num\">{_p(r.p_target)}</td>"
            f'<td class="num">{_p(r.accept_prob)}</td><td>{_evidence(x, r)}</td>'
            f'<td class="verdict verdict-{r.verdict}">{VERDICT_WORDS[r.verdict]}</td></tr>'
        )
    if x.unseen_rejected:  # counted by the engine, never sent: one row for all of them
        n = x.unseen_rejected
        span = f"{len(x.rows) + 1}" + (f"\u2013{len(x.rows) + n}" if n > 1 else "")  # positions, e.g. 3-5
        rows.append(
            f'<tr class="row-rejected" data-verdict="rejected"><td class="num">{span}</td><td>{unseen_chip(n, x.engine)}</td>'
            '<td class="num">\u2014</td><td class="num">\u2014</td><td class="num">\u2014</td>'
            f"<td>{escape(x.engine)} does not send rejected draft tokens</td>"
            '<td class="verdict verdict-rejected">rejected</td></tr>'
        )
    return f'<table class="step-table">{head}{"".join(rows)}</table>'


def _p(value: float | None) -> str:
    return "\u2014" if value is None else f"{value:.3f}"  # a dash: the engine does not report it


def _evidence(x: StepExplanation, r) -> str:
    if r.verdict == DISCARDED:
        return "never checked: the step ends at the first rejection"
    if x.greedy:
        margin = f" (top-2 logit margin {r.margin:.2f})" if r.margin is not None else ""
        if r.verdict == ACCEPTED:
            return f"the target's top token here too{margin}"
        return f"the target's top token is {_tok('correction', r.target_choice or '')}{margin}"
    if r.accept_prob is None:
        return "kept (the engine does not report p and q)"
    if r.u is None:
        return f"kept with probability {r.accept_prob:.3f} (the draw u is recorded for stepped runs)"
    sign = "&lt;" if r.verdict == ACCEPTED else "\u2265"
    return f"u = {r.u:.3f} {sign} {r.accept_prob:.3f}"


def _token_sentence(x: StepExplanation) -> str:
    if x.kind == EOS_ACCEPTED:
        return "An accepted draft token is an end-of-sequence token: the run ends there, with no target token after it."
    token = _tok({CORRECTION: "correction", BONUS: "bonus", PLAIN: "plain"}[x.kind], x.token_text or "")
    margin = f" (top-2 logit margin {x.token_margin:.2f})" if x.token_margin is not None else ""
    n = x.accepted + 1
    if x.kind == PLAIN:
        return f"The target's token: {token}{margin}, from a one-token pass."
    if x.kind == CORRECTION:
        if x.greedy:
            return f"Correction {token}: the target's top token at position {n}{margin}, where it turned the draft down."
        return (f"Correction {token}: drawn from the residual normalise(max(0, p_target \u2212 p_draft)) at position {n}, "
                "the probability the target wants there beyond what the draft offered.")
    if x.greedy:
        return (f"Bonus {token}: every draft was kept, and the same target pass also scored the position after "
                f"the last one, so its top token there comes free{margin}.")
    return (f"Bonus {token}: every draft was kept, so the token after them is drawn from p_target at position {n} "
            "(no draft there: the residual is p_target itself), scored by the same pass.")


def _rule_caption(x: StepExplanation) -> str:
    if not x.rows:
        return "One target pass, one token."
    if x.greedy:
        return ("Greedy rule: a draft token is kept while it equals the target's top token; the margin says how clear "
                "that choice was. The output is exactly what the target alone would write. p_target and p_draft are "
                "each model's softmax, shown for how sure it was.")
    return ("Sampling rule (Leviathan et al. 2023): a draft token is kept when a uniform draw u falls below "
            "min(1, p_target / p_draft); at the first rejection the target draws from the residual. Together they make "
            "the output follow p_target exactly, whatever the draft proposes.")


def _bar(value: float | None, colour: str) -> str:
    if value is None:
        return '<td class="num">\u2014</td>'
    width = max(0.0, min(70.0, 70.0 * value))  # 70% of the cell is probability 1; the number follows the bar
    return (f'<td class="bar-cell"><span class="bar" style="width:{width:.1f}%;background:{colour}"></span>'
            f'<span class="num">{value:.3f}</span></td>')


SHOWN_CANDIDATES = 10  # rows of the distributions table (the drawn and the rejected token always among them)


def _distributions(x: StepExplanation) -> str:
    d = x.detail
    bonus = d.at >= len(x.rows)  # after the last draft: nothing drafted there, q = 0 and the residual is p itself
    residual = not x.greedy and not bonus
    rejected = x.rows[d.at].id if not bonus and x.rows[d.at].verdict == REJECTED else None
    visible = [c for c in d.candidates if max(c.p, c.q, c.residual or 0.0) >= 0.0005]  # 0.000 in every column says nothing
    shown_ids = [c.id for c in visible[:SHOWN_CANDIDATES]]
    shown_ids += [i for i in (d.drawn, rejected) if i is not None and i not in shown_ids]
    head = ("<tr><th>token</th><th>p_target</th>" + ("" if bonus else "<th>p_draft</th>")
            + ("<th>residual</th>" if residual else "") + "<th></th></tr>")
    rows = []
    for c in (c for c in d.candidates if c.id in shown_ids):
        marks = []
        if c.id == d.drawn:
            marks.append("the target's top token" if x.greedy else "drawn")
        if c.id == rejected:
            marks.append("the rejected draft")
        cls = " drawn" if c.id == d.drawn else ""
        rows.append(f'<tr class="cand{cls}"><td><code>{shown(c.text) or "&nbsp;"}</code></td>{_bar(c.p, palette.P_TARGET)}'
                    f"{'' if bonus else _bar(c.q, palette.Q_DRAFT)}{_bar(c.residual, palette.RESIDUAL) if residual else ''}"
                    f'<td class="mark">{escape(", ".join(marks))}</td></tr>')
    if bonus:
        title = (f"At position {d.at + 1}, after the last draft: the target's distribution p_target, "
                 + ("whose top token is the bonus" if x.greedy else "from which the bonus token was drawn"))
        note = "Tokens shown: the most likely under p_target and the bonus token."
    elif residual:
        title = (f"At position {d.at + 1}: the target's distribution p_target, the draft's p_draft, and the residual "
                 "normalise(max(0, p_target \u2212 p_draft)) the target drew its correction from")
        note = ("Tokens shown: the most likely under each distribution, the rejected draft token and the drawn one. "
                "Where the draft offered at least what the target wants (p_draft \u2265 p_target) the residual is 0; "
                "it gives that probability to the tokens the draft under-offered, so the output follows p_target exactly.")
    else:
        title = (f"At position {d.at + 1}: the target's distribution p_target and the draft's p_draft; greedy takes "
                 "the target's top token, so there is no residual")
        note = "Tokens shown: the most likely under each distribution and the rejected draft token."
    return (f'<div class="dist"><div class="dist-title">{escape(title)}</div>'
            f'<table class="dist-table">{head}{"".join(rows)}</table><p class="caption">{escape(note)}</p></div>')
