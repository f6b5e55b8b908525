"""The Advanced settings: every control that tunes how a run is made rather than what the page
shows, folded into one closed accordion whose label sums up their current values in one line, so
the first screen keeps the prompt, Generate and both token panes in view. app/page.py lays them
out; this module holds their defaults, the label and their help texts."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from specdec.engines import choice
from specdec.kernels.runner_defaults import default_runner
from specdec.kernels.variants import default_variant

DRAFTERS = [("draft model", "model"), ("prompt lookup", "lookup"), ("auto: lookup, else draft model", "auto")]
SHORT_DRAFTERS = {"model": "draft model", "lookup": "prompt lookup", "auto": "auto drafter"}


@dataclass(frozen=True)
class AdvancedValues:
    """What the Advanced controls hold, in the order of Page.advanced_controls()."""

    drafter: str = "model"
    draft_variant: str = "bf16"
    target_kernel: str = "bf16"
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
    """What the controls start at: the draft variant and the runner measured fastest on this kind of machine."""
    return AdvancedValues(draft_variant=default_variant(default_pair, device), runner=default_runner(device))


def relabel(*values) -> dict:
    """The accordion's new label, from the Advanced controls' values (in AdvancedValues' order)."""
    return gr.update(label=summary(AdvancedValues(*values)))


# Help under the dropdowns; each is followed on the page by what this device leaves out, and why.
DRAFT_VARIANT_HELP = (
    "the draft made cheaper: int8/int4 weights, w8a8 = int8 weights and activations, "
    "-v16k/-v32k scores only the most frequent tokens. "
    "The output stays the target's; only acceptance and speed change. Default: measured fastest here. "
)
TARGET_KERNEL_HELP = (
    "how the target runs: bf16 = the dense weights as loaded (fp32 on a CPU without native bf16), "
    "int8 = weight-only int8 per row, q4k = the GGUF's own 4-bit grid in torch's int4 kernel, "
    "w8a8 = int8 weights and int8 activations, one scale per 128 values of each token (a check of several tokens costs about one). "
    "Plain decoding beside it runs the same kernel. "
)
RUNNER_HELP = (
    "how both models' passes run: eager = transformers as it is, a growing cache; static = a preallocated cache, "
    "a few fixed shapes, one read from the device per step; compiled = static with each shape captured once "
    "(CUDA graphs on a GPU, torch.compile on a CPU: minutes the first time). Same tokens; only speed changes. "
    "Default: measured fastest here, start-up counted. With the w8a8 kernel, compiled made speculative runs "
    "1.17x faster once its ~4 minutes of compiling were paid (a 2-core Intel Xeon; docs/benchmarks.md)."
)
