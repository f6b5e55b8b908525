"""The "How it works" tab's content (laid out in app/page.py): one step as a diagram
(assets/how_it_works.svg), the formulas behind the page's predictions with every symbol in plain
words, why the output is exactly the target's, and what the trained head's data bought
(assets/head_data.json: each head trained here, its data and its held-out acceptance)."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go

from . import palette
from .charts import titled_figure

ASSETS = Path(__file__).resolve().parent.parent / "assets"
DIAGRAM = (ASSETS / "how_it_works.svg").read_text(encoding="utf-8")
HEAD_DIAGRAM = (ASSETS / "head.svg").read_text(encoding="utf-8")
HEAD_DATA = ASSETS / "head_data.json"


def head_points(path: Path = HEAD_DATA) -> list[dict]:
    """The heads trained here, fewest training tokens first ([] where the file cannot be read)."""
    try:
        return sorted(json.loads(path.read_text(encoding="utf-8"))["heads"], key=lambda h: h["train_tokens"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def head_data_figure(points: list[dict] | None = None) -> go.Figure:
    """Acceptance at draft position 1, as a run drafts, against the tokens the head was trained on:
    one line for the target's held-out answers, one for held-out read text."""
    points = head_points() if points is None else points
    fig = titled_figure("What the head's data bought", "training tokens (features of the target)", "accepted at draft position 1")
    x = [p["train_tokens"] for p in points]
    head, slate = palette.DRAFTER_COLOURS["head"], palette.SPARE_DRAFTER_COLOURS[0]
    for key, name, colour, dash in (("answers", "held-out answers of the target", head, "solid"), ("read_text", "held-out read text", slate, "dash")):
        fig.add_scatter(x=x, y=[p["walk_at_1"][key] for p in points], name=name, mode="lines+markers",
                        line=dict(color=colour, width=2, dash=dash), customdata=[p["label"] for p in points],
                        hovertemplate=f"{name}: %{{y:.2f}} after %{{x:,}} tokens (%{{customdata}})<extra></extra>")
    fig.update_layout(xaxis=dict(type="log"), yaxis=dict(range=[0, 1]))
    return fig

STEP = """
## One step, as drawn above

Each step of speculative decoding runs the large **target** model once, however many tokens it
yields:

1. **Draft.** A small, fast **draft** model guesses the next K tokens, one quick pass each (or
   prompt lookup copies them from earlier text, at almost no cost).
2. **Verify.** The target scores the last token and the K guesses in **one** forward pass over
   K + 1 positions. Its output at each position is its own choice for the next slot, so it
   checks every guess at once.
3. **Keep** the guesses up to the first one the target disagrees with (green, underlined); drop
   that one and everything after it (red, struck through).
4. **Add** one token of the target's own: at the first disagreement, its choice there (a
   *correction*, amber, wavy underline); when all K were kept, its choice after the last guess (a
   *bonus*, blue, double underline).

So every step makes between 1 and K + 1 tokens for one target pass; plain decoding makes 1.
"""

HEAD = """
## A draft that reads the target: the trained head

The draft model and prompt lookup guess without looking inside the target. The drafts that
engines run today (EAGLE heads, the multi-token-prediction heads inside DeepSeek, Qwen and Gemma)
read the target's own **features**: the hidden state its last layer hands to its output layer.
The check already computes them, so they cost nothing extra. The **head** (Drafter: *head*, where
a head file for the pair is found and verified) is one decoder layer trained here on the target's
features and its own answers. It takes the feature at position t and the next token, and predicts
the feature at t + 1. The target's own output layer turns that into a draft token and its
probabilities q. It then drafts again from its own prediction, as drawn above.

One head step is about 1/28 of a target pass, so its **c** is small (about 0.05 of a decode step,
against about 0.2 to 0.3 for the 0.5B draft model). How often it is kept (**α**) is what its
training bought: the charts *acceptance by draft position* and *accepted drafts per step* on the
Live tab show it per drafter, and the co-design map on the Theory tab places its run beside the
others. The target still checks every guess, so the output stays exactly the target's.
"""

FORMULAS = r"""
## What to expect: the formulas behind the predictions

The page predicts the speedup three ways (under the panes, and on the Theory tab), from
Leviathan et al. (2023) and from what the run measured. The symbols:

- **α**, the *per-token acceptance*: the chance that the target keeps one draft token, given that
  the ones before it were kept. The page estimates it as accepted draft tokens / (accepted draft
  tokens + steps that rejected one), because a step checks its guesses in order and stops at the
  first wrong one. The share of drafted tokens accepted is shown beside it and is lower: the
  guesses after a rejected one are thrown away without being judged.
- **K**, the *draft length*: how many tokens the draft guesses per step (the K slider).
- **c**, the *draft cost*: the time of one draft pass divided by one plain decoding step of the
  target (near 0 for prompt lookup, which copies from the prompt).
- **v**, the *verify cost*: the time of one target pass over K + 1 positions, in plain decoding
  steps. Where decoding is limited by reading the weights from memory (a GPU, bf16 on a CPU with
  native bf16) it is close to 1; where it is limited by arithmetic (fp32 on a 2-core CPU) it is
  1.5 to 3.

**Expected tokens per target pass.** The first token of a step is always made (the target's
own); the second only if the first guess was kept (chance α), the third if the first two were
(α²), and so on up to K + 1:

$$\text{tokens per pass} = 1 + \alpha + \alpha^2 + \dots + \alpha^K = \frac{1 - \alpha^{K+1}}{1 - \alpha}$$

**Expected speedup** over plain decoding. A step costs K draft passes (K·c plain steps) and one
target pass over K + 1 positions (v plain steps). The textbook takes v = 1:

$$\text{speedup} = \frac{1 - \alpha^{K+1}}{(1 - \alpha)\,(K c + v)}$$

The third prediction needs no formula for the tokens: the tokens per pass the run really made,
times one plain step, over the time one speculative step really took. It matches the measured
speedup by construction, so it shows where the time went; the gap between it and the other two
shows what the formula leaves out. The formula assumes every guess is kept independently with the
same chance α. Real acceptance comes in bursts (easy stretches of code are accepted whole, hard
ones not at all), so the tokens per pass of one run can differ from the formula's either way.
"""


EXACT = """
## Why the output is exactly the target's

**Greedy** (temperature 0). Plain decoding picks the target's most likely token at every position.
A guess is kept only if it *is* that token, given the same text before it, and the token added
after the kept guesses is the target's most likely one there. So every token shown is the one plain
decoding would have picked, in the same order: the text is identical, made in fewer target passes.
The one caveat is arithmetic: scoring K + 1 positions in one pass adds numbers in another order
than K + 1 single passes, so where the target's top two choices are nearly tied (a top-2 logit
margin near 0, more often in bf16) a token can flip. The badge under the panes then says where
the two runs first differ and how close that tie was. Some target kernels are made **batch-invariant** (`w8a8`, `w4a8`, `int8`, and the
dense target in fp32, on a CPU): every row of a check gets exactly the bits a one-token pass gives
it, so on those the speculative text equals plain decoding's bit for bit, ties included, and the
badge says any difference is a fault.

**Sampling** (temperature above 0). The target's distribution p and the draft's q are both known
at every guessed position. A guess x is kept with probability min(1, p(x) / q(x)); when it is
turned down, the replacement is drawn from what p has left over, max(0, p − q) renormalised. This
rejection-sampling rule (Leviathan et al. 2023; Chen et al. 2023) makes every token follow p
exactly, whatever the draft proposed: the draft changes how fast the text comes, never which text
is likely. Two sampled runs use their random numbers differently, so their texts differ from each
other while both follow the target's distribution; the project's tests check that with a
chi-square test.
"""


def head_data_text(points: list[dict] | None = None) -> str:
    """Under the figure: what each point is, in the figures drawn."""
    points = head_points() if points is None else points
    if not points:
        return ""
    # A point judged on another held-out set than the first says so (`held_out`): its figure is not
    # on the same scale as the points before it.
    runs = "; ".join(f"{p['label']} ({p['train_tokens']:,} tokens of features): {p['walk_at_1']['answers']:.2f} on the target's "
                     f"answers and {p['walk_at_1']['read_text']:.2f} on read text" + (f", {p['held_out']}" if p.get("held_out") else "")
                     for p in points)
    return (
        "**What its data bought.** Each point is a head trained on this page's target, judged on held-out "
        "text it never saw: the share of its first guesses the target keeps, counted as a run drafts (each step starts "
        f"where the last one ended, five guesses a step): {runs}. With the head's c near 0.06, the formulas below "
        "give about 1.5x plain decoding where a first guess is kept half the time: the curve says how much data that takes."
    )


HEAD_DATA_TEXT = head_data_text()

