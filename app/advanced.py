"""The Advanced settings: every control that tunes how a run is made rather than what the page
shows, folded into one closed accordion whose label sums up their current values in one line, so
the first screen keeps the prompt, Generate and both token panes in view. app/page.py lays them
out; this module holds their defaults, the label and their help texts."""

from __future__ import annotations

import html
from dataclasses import dataclass

import gradio as gr

from specdec.engines import choice
from specdec.serving.defaults_here import read_choice, start_defaults

DRAFTERS = [("draft model", "model"), ("prompt lookup", "lookup"), ("auto: lookup, else draft model", "auto")]
# offered where a verified head file is (drafter_choices)
HEAD_CHOICES = [("head: a layer trained on the target's own hidden states", "head"),
                ("auto: lookup, else trained head", "auto_head"),
                ("auto: lookup, else the head or the draft model, whichever is priced faster", "auto_both")]
SHORT_DRAFTERS = {"model": "draft model", "lookup": "prompt lookup", "auto": "auto drafter", "head": "trained head",
                  "auto_head": "auto drafter (head)", "auto_both": "auto: head or draft model"}


def drafter_choices(pair_name: str) -> tuple[list[tuple[str, str]], str]:
    """(the Drafter choice's options, its info line) for the page's pair: the head among them when
    a head file for that pair is found and verified (specdec.kernels.head_offer.head_note), else the
    info line says why it is not offered."""
    from specdec.kernels.head_offer import head_note

    why = head_note(pair_name)
    if not why:
        return [*DRAFTERS, *HEAD_CHOICES], f"head: one layer that reads the target's final hidden states ({pair_name}'s head file, verified)."
    return list(DRAFTERS), f"The trained head is not offered: {why}"


@dataclass(frozen=True)
class AdvancedValues:
    """What the Advanced controls hold, in the order of Page.advanced_controls()."""

    drafter: str = "model"
    draft_variant: str = "dense"
    target_kernel: str = "dense"
    runner: str = "eager"
    adaptive: bool = False  # Adaptive K (with cost_k ticked too a run is refused, and the summary says so)
    cost_k: bool = False  # K from this machine's pass costs
    top_p: float | None = 1.0
    top_k: int | float | None = 0  # 0 = off; a cleared number box sends None
    seed: int | float | None = 0
    engine: str = choice.DEFAULT
    spec_url: str | None = ""
    plain_url: str | None = ""
    lossy: bool = False  # the lossy lane: plain decoding on an int4 target
    show_rejected: bool = True


def _number(value) -> str:
    """A number as a person would write it; a cleared box says so instead of failing."""
    if value is None or value == "":
        return "(empty)"
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _engine(values: AdvancedValues) -> str:
    try:
        name = choice.label(values.engine)
    except ValueError:  # not an engine of this project: shown as it came
        return str(values.engine)
    if choice.capabilities(values.engine).in_process:  # no server, so no URLs to show
        return name
    spec_url, plain_url = (values.spec_url or "").strip(), (values.plain_url or "").strip()
    where = f" at {spec_url}" if spec_url else " (no URL yet)"
    return name + where + (f", plain at {plain_url}" if plain_url else ", no plain server")


def summary(values: AdvancedValues) -> str:
    """The accordion's label: every Advanced value in one line, in the order the controls appear."""
    k_policy = ("adaptive K and K from pass costs both ticked: choose one" if values.adaptive and values.cost_k
                else "adaptive K" if values.adaptive else "K from pass costs" if values.cost_k else "fixed K")
    top_k = "top-k off" if values.top_k == 0 else f"top-k {_number(values.top_k)}"
    parts = [
        SHORT_DRAFTERS.get(values.drafter, str(values.drafter)),
        f"draft {values.draft_variant}",
        f"target {values.target_kernel}",
        f"{values.runner} runner",
        k_policy,
        f"top-p {_number(values.top_p)}",
        top_k,
        f"seed {_number(values.seed)}",
        _engine(values),
        "lossy lane on" if values.lossy else "no lossy lane",
        "rejected shown" if values.show_rejected else "rejected hidden",
    ]
    return "Advanced: " + " \u00b7 ".join(parts)


def defaults(default_pair: str, device) -> AdvancedValues:
    """What the controls start at: the fastest exact configuration for this pair, measured on this
    machine where it was, else recorded for this kind of machine (specdec.serving.defaults_here;
    defaults_line says which and why)."""
    chosen = start_defaults(default_pair, device)
    return AdvancedValues(drafter=chosen.drafter, draft_variant=chosen.draft_variant, target_kernel=chosen.target_kernel,
                          runner=chosen.runner, adaptive=chosen.k_policy == "adaptive", cost_k=chosen.k_policy == "cost")


def defaults_line(default_pair: str, device) -> str:
    """ONE line under the settings, what the run starts on and where that comes from, with the
    figures behind a closed disclosure (so the token panes stay on the first screen); HTML, escaped."""
    measured = read_choice(default_pair, device)
    chosen = start_defaults(default_pair, device)
    start = (f"Started on target {chosen.target_kernel}, draft {chosen.draft_variant}, drafter {chosen.drafter}, "
             f"{chosen.runner} runner, K policy {chosen.k_policy}")
    if measured is None:
        where = "Not measured here"
        figures = f"<p>{html.escape(start)}: recorded for this kind of machine, not measured here.</p><p>{html.escape(chosen.line)}</p>"
    else:
        where = "Measured on this machine"
        figures = (f"<p>{html.escape(start)}: measured on this machine.</p><p>{html.escape(measured.line)}.</p>"
                   + candidates_table(measured))
    line = f"{where}: {chosen.target_kernel}, {chosen.draft_variant} draft"  # short: it shares a column with Compare
    return (f'<details class="defaults-line"><summary title="{html.escape(start, quote=True)}">{html.escape(line)}</summary>'
            f"{figures}</details>")


def candidates_table(measured) -> str:
    """The measured candidates, fastest first: their costs here and predicted speeds (HTML)."""
    rows = []
    for c in sorted(measured.candidates, key=lambda x: -x.tok_s):
        mark = ' class="chosen"' if c == measured.chosen else ""
        c_text = "" if c.c is None else f"{c.c:.2f}"
        alpha = "" if c.alpha is None else f"{c.alpha:.2f}"
        draft = "" if c.draft_s is None else f"{1000 * c.draft_s:.1f}"
        rows.append(f"<tr{mark}><td>{html.escape(c.name)}</td><td>{1000 * c.decode_step_s:.1f}</td><td>{draft}</td>"
                    f"<td>{c_text}</td><td>{alpha}</td><td>{c.k}</td><td>{c.tok_s:.1f}</td></tr>")
    skipped = "".join(f"<li>{html.escape(what)}: {html.escape(why)}</li>" for what, why in measured.skipped.items())
    return ('<table class="defaults-table"><tr><th>configuration</th><th>decode step ms</th><th>draft step ms</th>'
            "<th>c</th><th>\u03b1 recorded</th><th>K</th><th>predicted tok/s</th></tr>" + "".join(rows) + "</table>"
            + (f"<p>Not measured:</p><ul>{skipped}</ul>" if skipped else ""))


def pair_defaults(default_pair: str, device) -> tuple:
    """The new values of the controls a pair's defaults set, in PAIR_CONTROLS' order, and its line."""
    values = defaults(default_pair, device)
    return (*(getattr(values, name) for name in PAIR_CONTROLS), defaults_line(default_pair, device))


PAIR_CONTROLS = ("drafter", "draft_variant", "target_kernel", "adaptive", "cost_k")  # what a pair's defaults set


def relabel(*values) -> dict:
    """The accordion's new label, from the Advanced controls' values (in AdvancedValues' order)."""
    return gr.update(label=summary(AdvancedValues(*values)))


# Help under the dropdowns; each is followed on the page by what this device leaves out, and why.
DRAFT_VARIANT_HELP = (
    "the draft made cheaper: dense = its weights as loaded, int8/int4 weights, w8a8 = int8 weights and activations, w4a8 = 4-bit Q4_K weights and int8 activations, "
    "-v16k/-v32k scores only the most frequent tokens. "
    "The output stays the target's; only acceptance and speed change. Default: this machine's (the line under the settings). "
)
TARGET_KERNEL_HELP = (
    "how the target runs: dense = the weights as loaded, in the pair's dtype (bf16, or fp32 on a CPU without native bf16), "
    "int8 = weight-only int8 per row, q4k = the GGUF's own 4-bit grid in torch's int4 kernel, "
    "w8a8 = int8 weights and int8 activations, one scale per 128 values of each token (a check of several tokens costs about one). "
    "w4a8 = the GGUF's own 4-bit grid with those int8 activations: about half w8a8's bytes, and exact under speculation as w8a8 is. "
    "Plain decoding beside it runs the same kernel. "
)
RUNNER_HELP = (
    "how both models' passes run: eager = transformers' ops without their layers' Python, a growing cache; static = a preallocated cache, "
    "a few fixed shapes, one read from the device per step; compiled = static with each shape captured once "
    "(CUDA graphs on a GPU, torch.compile on a CPU: minutes the first time). Same tokens; only speed changes. "
    "Default: this machine's (the line under the settings says which and why). With the w8a8 kernel, compiled made speculative runs "
    "1.17x faster once its ~4 minutes of compiling were paid (a 2-core Intel Xeon; docs/benchmarks.md)."
)
