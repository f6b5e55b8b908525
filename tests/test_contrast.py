"""The token colours as the browser gets them (assets/style.css): every token class's text against
its background reaches WCAG 2 contrast 4.5 in the light and the dark theme, its line (underline,
strike-through) reaches 3 against the tint, and each meaning has its own shape, not just a colour."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app import palette
from app.render import LABELS

CSS = (Path(__file__).resolve().parent.parent / "assets" / "style.css").read_text()
THEMES = {"light": "", "dark": ".dark "}


def rules(css: str) -> dict[str, dict[str, str]]:
    """selector -> {property: value}, later rules overriding earlier ones (comments dropped)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    out: dict[str, dict[str, str]] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", css):
        decls = dict((k.strip(), v.strip()) for k, v in (d.split(":", 1) for d in body.split(";") if ":" in d))
        for selector in selectors.split(","):
            out.setdefault(" ".join(selector.split()), {}).update(decls)
    return out


RULES = rules(CSS)


def style(selector: str, theme: str) -> dict[str, str]:
    """The declarations that apply to `selector` in `theme`: the light rule, then the dark one over it."""
    props = dict(RULES.get(".tok", {})) if selector.startswith(".tok-") else {}
    props.update(RULES.get(selector, {}))
    if theme == "dark":
        props.update(RULES.get(".dark " + selector, {}))
    return props


def colours(cls: str, theme: str, box: str = ".tokens") -> tuple[tuple, tuple, tuple | None]:
    """(text colour, background as painted, line colour) of a token of class `cls` inside `box`."""
    pane = style(box, theme)
    base = palette.parse_colour(pane["background"])
    assert base[3] == 1.0, f"{box} needs an opaque background in the {theme} theme"
    tok = style(f".tok-{cls}", theme)
    background = palette.over(palette.parse_colour(tok.get("background", "transparent")), base)
    text = palette.over(palette.parse_colour(tok.get("color", pane["color"])), background)
    line = tok.get("text-decoration-color")
    return text, background, palette.over(palette.parse_colour(line), background) if line else None


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("cls", list(LABELS))
@pytest.mark.parametrize("box", [".tokens", ".legend"])
def test_token_text_has_contrast_4_5_in_both_themes(cls, theme, box):
    text, background, _ = colours(cls, theme, box)
    ratio = palette.contrast(text, background)
    assert ratio >= 4.5, f"{cls} in {box} ({theme}): contrast {ratio:.2f}"


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("cls", [c for c in LABELS if c != "plain"])
def test_token_lines_stand_out_from_their_tint(cls, theme):
    _, background, line = colours(cls, theme)
    assert line is not None, f"{cls} has no line colour"
    assert palette.contrast(line, background) >= 3.0, f"{cls} ({theme}): its line is too faint"


def test_each_meaning_has_its_own_shape():
    shapes = {}
    for cls in LABELS:
        tok = style(f".tok-{cls}", "light")
        shapes[cls] = (tok.get("text-decoration-line", "none"), tok.get("text-decoration-style", "solid"))
    assert shapes["rejected"][0] == "line-through"
    assert shapes["plain"][0] == "none"
    assert all(shapes[c][0] == "underline" for c in ("accepted", "correction", "bonus"))
    assert len(set(shapes.values())) == len(shapes), shapes  # no two meanings share a shape


def test_the_dark_theme_changes_the_pane_and_the_rules_are_ones_gradio_keeps():
    assert style(".tokens", "dark")["background"] != style(".tokens", "light")["background"]
    # Gradio copies each custom rule under its container and moves a leading ".dark" in front of it;
    # in a selector list only the first ".dark" would survive that, so each dark rule has one selector.
    for selectors in re.findall(r"([^{}]+)\{", re.sub(r"/\*.*?\*/", "", CSS, flags=re.S)):
        if ".dark" in selectors:
            assert "," not in selectors, selectors.strip()


def test_contrast_arithmetic_matches_known_values():
    black, white = palette.parse_colour("#000"), palette.parse_colour("#ffffff")
    assert palette.contrast(black, white) == pytest.approx(21.0)
    assert palette.contrast(palette.parse_colour("#767676"), white) == pytest.approx(4.54, abs=0.01)  # the 4.5 grey
    assert palette.over(palette.parse_colour("#ff000080"), white)[:3] == pytest.approx((255, 127.0, 127.0), abs=0.5)
