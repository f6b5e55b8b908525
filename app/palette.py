"""One colour per meaning, shared by the token panes (assets/style.css repeats these hex values) and the charts."""

ACCEPTED = "#16a34a"  # green: a draft token the target kept
REJECTED = "#dc2626"  # red: a draft token the target turned down (not part of the output)
CORRECTION = "#d97706"  # amber: the target's own token after a rejection
BONUS = "#2563eb"  # blue: the target's extra token after a fully accepted draft
PLAIN = "#6b7280"  # neutral grey: a token from plain decoding (no draft)
SPECULATIVE = "#7c3aed"  # violet: the speculative run as a whole (throughput line, tokens-per-pass bars)

# Who drafted (the by-position and accepted-length charts): keyed by StepEvent.drafter, so a new
# drafter gets the next spare colour until it is given its own. Each reaches contrast 3 as a line on
# a white and on a near-black page (tests/test_charts.py).
DRAFTER_COLOURS = {
    "model": "#6366f1",  # indigo: the draft model
    "lookup": "#9a6b3f",  # brown: prompt lookup
    "head": "#c026d3",  # fuchsia: a head trained on the target's features
}
SPARE_DRAFTER_COLOURS = ("#64748b", "#0e7490", "#b45309")  # slate, dark cyan, burnt orange: drafters not named above


def drafter_colours(names) -> dict[str, str]:
    """name -> colour for the drafters of one run: their own, else the spare ones in order of appearance."""
    names = list(names)
    spare = iter(SPARE_DRAFTER_COLOURS * (1 + len(names)))  # more drafters than spares: the spares repeat
    return {name: DRAFTER_COLOURS.get(name) or next(spare) for name in names}

# Token class -> colour; render.py and the CSS use exactly these class names.
TOKEN_COLOURS = {
    "accepted": ACCEPTED,
    "rejected": REJECTED,
    "correction": CORRECTION,
    "bonus": BONUS,
    "plain": PLAIN,
}

# The step panel's three distributions at the decisive position. The residual is amber because the
# correction token is drawn from it.
P_TARGET = "#0d9488"  # teal: the target's distribution p
Q_DRAFT = "#db2777"  # pink: the draft's distribution q
RESIDUAL = CORRECTION  # amber: normalise(max(0, p - q))


# --- WCAG 2 contrast, for checking the colours of assets/style.css (tests/test_contrast.py) ---------

def parse_colour(text: str) -> tuple[float, float, float, float]:
    """'#rgb', '#rrggbb', '#rrggbbaa', 'rgb(...)', 'rgba(...)' or 'transparent' -> (r, g, b, alpha), 0-255 and 0-1."""
    text = text.strip().lower()
    if text == "transparent":
        return (0.0, 0.0, 0.0, 0.0)
    if text.startswith("#"):
        h = text[1:]
        if len(h) == 3:
            h = "".join(c * 2 for c in h)
        if len(h) not in (6, 8):
            raise ValueError(f"not a colour: {text!r}")
        r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
        return (r, g, b, int(h[6:8], 16) / 255 if len(h) == 8 else 1.0)
    if text.startswith(("rgb(", "rgba(")):
        parts = [float(p) for p in text[text.index("(") + 1 : -1].replace("/", ",").replace(" ", ",").split(",") if p]
        return (parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else 1.0)
    raise ValueError(f"not a colour: {text!r}")


def over(colour: tuple, background: tuple) -> tuple[float, float, float, float]:
    """`colour` (possibly translucent) painted over an opaque `background`."""
    *rgb, a = colour
    return (*(a * c + (1 - a) * b for c, b in zip(rgb, background[:3])), 1.0)


def luminance(colour: tuple) -> float:
    """WCAG 2 relative luminance of an opaque sRGB colour."""
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in colour[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple, b: tuple) -> float:
    """WCAG 2 contrast ratio of two opaque colours, 1 to 21 (text needs 4.5, lines and shapes 3)."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)
