"""app.render: escaping, whitespace, one class per kind, hidden rejections, stats and badge."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app import palette
from app.render import render_badge, render_event, render_legend, render_stats, render_tokens
from specdec.core.events import BONUS, CORRECTION, EOS_ACCEPTED, PLAIN
from specdec.measure.metrics import summarize
from tests.support.events import XSS, make_events

SPAN = re.compile(r'<span class="tok tok-(\w+)"(?: data-step="\d+")? title="([^"]*)">([^<]*)</span>')


def spans(html: str) -> list[tuple[str, str, str]]:
    return SPAN.findall(html)


def test_every_kind_maps_to_one_class():
    events = make_events([
        (["a", "b", "c"], 1, "X", CORRECTION),  # accepted a, rejected b c, correction X
        (["d", "e"], 2, "Y", BONUS),
        ([], 0, "Z", PLAIN),
        (["f", "<eos>"], 2, None, EOS_ACCEPTED),
    ])
    got = [(cls, text) for cls, _, text in spans(render_tokens(events))]
    assert got == [
        ("accepted", "a"), ("rejected", "b"), ("rejected", "c"), ("correction", "X"),
        ("accepted", "d"), ("accepted", "e"), ("bonus", "Y"),
        ("plain", "Z"),
        ("accepted", "f"), ("accepted", "&lt;eos&gt;"),  # the eos step adds no target token
    ]


def test_classes_and_colours_are_one_to_one():
    classes = set(palette.TOKEN_COLOURS)
    assert classes == {"accepted", "rejected", "correction", "bonus", "plain"}
    assert len(set(palette.TOKEN_COLOURS.values())) == len(classes)
    assert palette.SPECULATIVE not in palette.TOKEN_COLOURS.values()
    css = (Path(__file__).resolve().parent.parent / "assets" / "style.css").read_text().lower()
    for cls, colour in palette.TOKEN_COLOURS.items():
        rule = re.search(r"\.tok-" + cls + r"\s*\{([^}]*)\}", css).group(1)
        others = [c for k, c in palette.TOKEN_COLOURS.items() if k != cls]
        assert not any(c in rule for c in others), cls  # no class borrows another meaning's colour
        if cls != "plain":
            assert colour in rule, cls


def test_legend_uses_the_token_classes():
    assert {cls for cls, _, _ in spans(render_legend())} == set(palette.TOKEN_COLOURS)


@pytest.mark.parametrize("evil", XSS)
def test_model_text_is_escaped_everywhere(evil):
    events = make_events([([evil, evil], 1, evil, CORRECTION), ([evil], 1, None, EOS_ACCEPTED)])
    html = render_tokens(events)
    for dangerous in ["<script", "<img", 'onmouseover="', "a & b'"]:
        assert dangerous not in html
    assert len(spans(html)) == 4  # every span still well formed: nothing broke out of a tag or attribute
    badge = render_badge(identical=False, index=3, spec_text=evil, plain_text=evil, margin=0.1, is_tie=True)
    assert "<script" not in badge and "<img" not in badge and 'onmouseover="' not in badge


def test_tooltips_are_escaped_and_informative():
    events = make_events([(["x", "y"], 1, "<b>", CORRECTION)])
    (_, t_acc, _), (_, t_rej, _), (_, t_cor, text) = spans(render_tokens(events))
    assert "p_target 0.5000" in t_acc and "p_draft 0.8000" in t_acc and "0.6250" in t_acc  # min(1, .5/.8)
    assert "rejected" in t_rej and "0.6250" in t_rej
    assert "target token" in t_cor and "correction" in t_cor and "0.2500" in t_cor
    assert text == "&lt;b&gt;"
    # quotes in a tooltip cannot close the attribute: titles are produced with quote=True
    assert "'" not in render_event(events[0]).split('title="')[1].split('"')[0]


def test_whitespace_and_newlines_survive():
    code = ["def", " f", "():\n", "    ", "return", " 1\n\n"]
    events = make_events([(code[:3], 3, code[3], BONUS), (code[4:], 2, "\t# done", BONUS)])
    html = render_tokens(events)
    assert [text for _, _, text in spans(html)] == code + ["\t# done"]
    body = re.sub(r"<[^>]+>", "", html)
    assert body == "".join(code) + "\t# done"


def test_rejected_newline_cannot_move_the_output():
    events = make_events([(["a", "\nb"], 1, "c", CORRECTION)])
    texts = [text for _, _, text in spans(render_tokens(events))]
    assert texts == ["a", "\u21b5b", "c"]


def test_show_rejected_false_hides_rejected_spans():
    events = make_events([(["a", "b", "c"], 1, "X", CORRECTION), (["d"], 0, "Y", CORRECTION)])
    shown = spans(render_tokens(events, show_rejected=True))
    hidden = spans(render_tokens(events, show_rejected=False))
    assert sum(cls == "rejected" for cls, _, _ in shown) == 3
    assert [(cls, text) for cls, _, text in hidden] == [("accepted", "a"), ("correction", "X"), ("correction", "Y")]
    assert "tok-rejected" not in render_tokens(events, show_rejected=False)


def test_empty_inputs_and_empty_tokens():
    assert render_tokens([]) == '<div class="tokens"></div>'
    events = make_events([(["a", ""], 2, "", BONUS)])  # tokens that decode to "" (e.g. EOS) leave no span
    assert [text for _, _, text in spans(render_tokens(events))] == ["a"]


def test_stats_row():
    spec = summarize(make_events([(["a", "b"], 2, "c", BONUS), (["d", "e"], 1, "f", CORRECTION)]))
    plain = summarize(make_events([([], 0, t, PLAIN) for t in "abcdef"]))
    html = render_stats(spec, plain)
    values = dict((label, value) for value, label in re.findall(
        r'<span class="stat-value">([^<]*)</span><span class="stat-label">([^<]*)</span>', html))
    assert values["speculative tok/s"] == f"{spec.tokens_per_s:.1f}"
    assert values["plain tok/s"] == f"{plain.tokens_per_s:.1f}"
    assert values["speedup"] == f"{spec.tokens_per_s / plain.tokens_per_s:.2f}\u00d7"
    assert values["per-token acceptance \u03b1"] == "0.75"  # 3 accepted, 1 rejection
    assert values["drafts accepted"] == "75%"
    assert values["tokens / target pass"] == "2.50"  # 3 + 2 tokens over 2 passes
    assert values["target passes saved"] == "4"
    assert "cost ratio c" in values and "verify cost" in values
    assert "predicted speedup" not in values  # the predictions have their own box, beside the measurement
    # while the plain run streams, passes saved would count half a run: a dash until both have ended
    assert dict((label, value) for value, label in re.findall(
        r'<span class="stat-value">([^<]*)</span><span class="stat-label">([^<]*)</span>',
        render_stats(spec, plain, plain_done=False)))["target passes saved"] == "\u2014"
    # without a plain run (or before it starts) the comparisons show a dash; nothing divides by zero
    for plain_run in (None, summarize([])):
        alone = render_stats(spec, plain_run)
        assert alone.count("\u2014") == 5  # plain tok/s, speedup, passes saved, and c and verify cost (no decode step)
    assert "stat" in render_stats(summarize([]), None)
    assert render_stats(spec, plain, badge=render_badge(identical=True)).count("badge-identical") == 1


def test_c_says_prompt_lookup_costs_no_draft_pass():
    from dataclasses import replace

    events = make_events([(["a", "b"], 2, "c", BONUS), (["d", "e"], 1, "f", CORRECTION)])
    lookup = [replace(e, drafter="lookup") for e in events]
    mixed = [replace(events[0], drafter="lookup"), replace(events[1], drafter="model")]
    html = render_stats(summarize(lookup, decode_step_s=0.05, decode_step_from="the plain run"))
    assert "0 (lookup)" in html and "costs no draft pass" in html
    html = render_stats(summarize(mixed, decode_step_s=0.05, decode_step_from="the plain run"))
    assert "(model " in html and "the draft model&#x27;s own" in html
    # the head's steps cost a draft pass: beside lookup's, c is a blend, never "0 (lookup)"
    with_head = [replace(events[0], drafter="lookup", draft_s=0.0), replace(events[1], drafter="head", draft_s=0.008)]
    html = render_stats(summarize(with_head, decode_step_s=0.05, decode_step_from="the plain run"))
    assert "0 (lookup)" not in html and "0.040" in html and "by the trained head" in html  # 8 ms over 4 drafted tokens
    # auto_both: the head's steps and the draft model's, each priced faster where it drafted: the blend, then the model's own
    both = [replace(events[0], drafter="head", draft_s=0.008), replace(events[1], drafter="model", draft_s=0.04)]
    html = render_stats(summarize(both, decode_step_s=0.05, decode_step_from="the plain run"))
    assert "0.240 (model 0.400)" in html and "steps drafted 1 by the trained head, 1 by the draft model" in html


def test_tokens_carry_their_step():
    events = make_events([(["a", "b"], 1, "X", CORRECTION), (["c"], 1, "Y", BONUS)])
    assert re.findall(r'data-step="(\d+)"', render_tokens(events)) == ["0", "0", "0", "1", "1"]
    assert "data-step" not in render_legend()


def test_badge():
    assert "identical" in render_badge(identical=True)
    msg = render_badge(identical=False, index=12, spec_text=" x", plain_text="\n", margin=0.0123, is_tie=True)
    assert "token 12" in msg and "&#x27; x&#x27;" in msg and "\\n" in msg
    assert "margin 0.0123: a numerical tie" in msg
    assert "not a numerical tie" in render_badge(identical=False, index=0, spec_text="a", plain_text="b",
                                                 margin=3.0, is_tie=False)
    assert "end of output" in render_badge(identical=False, index=5, spec_text=None, plain_text="b")


def test_tooltip_names_the_rule_that_decided():
    from dataclasses import replace

    event = make_events([(["a", "b"], 1, "c", CORRECTION)])[0]
    greedy_titles = [t for _, t, _ in SPAN.findall(render_event(replace(event, greedy=True)))]
    sampled_titles = [t for _, t, _ in SPAN.findall(render_event(event))]
    assert "top choice" in greedy_titles[0] and "acceptance probability" not in greedy_titles[0]
    assert "acceptance probability min(1, p_target/p_draft) = 0.6250" in sampled_titles[0]


def test_the_status_line_is_escaped_and_keeps_its_details_behind_a_closed_disclosure():
    from app.render import render_status

    line, details = "Not started: <script>alert(1)</script> & more", "from <assets>/pair & co"
    html = render_status(line, details)
    assert html.startswith('<details class="status-line"><summary>') and " open" not in html  # closed
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more</summary>" in html
    assert "<p>from &lt;assets&gt;/pair &amp; co</p></details>" in html
    assert render_status(line) == '<p class="status-line">Not started: &lt;script&gt;alert(1)&lt;/script&gt; &amp; more</p>'
