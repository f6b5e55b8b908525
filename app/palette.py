"""One colour per meaning, shared by the token panes (assets/style.css repeats these hex values) and the charts."""

ACCEPTED = "#16a34a"  # green: a draft token the target kept
REJECTED = "#dc2626"  # red: a draft token the target turned down (not part of the output)
CORRECTION = "#d97706"  # amber: the target's own token after a rejection
BONUS = "#2563eb"  # blue: the target's extra token after a fully accepted draft
PLAIN = "#6b7280"  # neutral grey: a token from plain decoding (no draft)
SPECULATIVE = "#7c3aed"  # violet: the speculative run as a whole (throughput line, tokens-per-pass bars)

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
