"""The Advanced settings: every control that tunes how a run is made rather than what the page
shows, folded into one closed accordion whose label sums up their current values in one line, so
the first screen keeps the prompt, Generate and both token panes in view."""

from __future__ import annotations

from dataclasses import dataclass, fields

import gradio as gr

from specdec.core.config import RUNNERS
from specdec.kernels import device_offer
from specdec.kernels.faithfulness_record import faithfulness_line
from specdec.kernels.runner_defaults import default_runner
from specdec.kernels.variants import default_variant
from specdec.models.pair import pick_device

from specdec.engines import choice

from . import engine_choice
from .page import Page

DRAFTERS = [("draft model", "model"), ("prompt lookup", "lookup"), ("auto: lookup, else draft model", "auto")]
SHORT_DRAFTERS = {"model": "draft model", "lookup": "prompt lookup", "auto": "auto drafter"}


@dataclass(frozen=True)
class AdvancedValues:
    """What the Advanced controls hold, in the order of their fields in `controls(page)`."""

    drafter: str = "model"
    draft_variant: str = "bf16"
    target_kernel: str = "bf16"
    runner: str = "eager"
    adaptive: bool = False  # Adaptive K; wins over cost_k, as GenerationConfig.policy does
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
    k_policy = "adaptive K" if values.adaptive else "K from pass costs" if values.cost_k else "fixed K"
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


def section(page: Page, default_pair: str, pair_note: str = "") -> None:
    """The closed accordion and the controls inside it; `page.advanced_fields` lists them in the
    order of AdvancedValues' fields (wire() reads them in that order). `pair_note`: why the pairs on
    offer are these (serving.pair_offer's Offer.explain), shown at the top."""
    device = pick_device()
    defaults = AdvancedValues(draft_variant=default_variant(default_pair, device), runner=default_runner(device))
    with gr.Accordion(summary(defaults), open=False, elem_id="advanced") as page.advanced:
        if pair_note:
            gr.Markdown(f"Model pairs here. {pair_note}", elem_id="pair-offer")
        controls(page, defaults, default_pair)
    page.advanced_fields = [page.drafter, page.draft_variant, page.target_kernel, page.runner, page.adaptive, page.cost_k,
                            page.top_p, page.top_k, page.seed, page.engine, page.spec_url, page.plain_url,
                            page.plain_int4, page.show_rejected]
    assert len(page.advanced_fields) == len(fields(AdvancedValues))


def controls(page: Page, defaults: AdvancedValues, default_pair: str = "") -> None:
    device = pick_device()  # the dropdowns list what runs honestly here, and say why the rest does not
    variants, kernels = device_offer.draft_variants(device), device_offer.target_kernels(device)
    page.drafter = gr.Radio(DRAFTERS, value=defaults.drafter, label="Drafter", elem_id="drafter")
    with gr.Row():
        page.draft_variant = gr.Dropdown(
            list(variants.names), value=defaults.draft_variant, label="Draft variant", elem_id="draft-variant",
            info="the draft made cheaper: int8/int4 weights, w8a8 = int8 weights and activations, "
                 "-v16k/-v32k scores only the most frequent tokens. "
                 "The output stays the target's; only acceptance and speed change. Default: measured fastest here. "
                 + variants.explain(device.type),
        )
        page.target_kernel = gr.Dropdown(
            list(kernels.names), value=defaults.target_kernel, label="Target kernel", elem_id="target-kernel",
            info="how the target runs: bf16 = the dense weights as loaded (fp32 on a CPU without native bf16), "
                 "int8 = weight-only int8 per row, q4k = the GGUF's own 4-bit grid in torch's int4 kernel, "
                 "w8a8 = int8 weights and int8 activations, one scale per 128 values of each token (a check of several tokens costs about one). "
                 "Plain decoding beside it runs the same kernel. " + kernels.explain(device.type)
                 + " " + faithfulness_line(default_pair, (*kernels.names, "llamacpp_plain")),
        )
    page.runner = gr.Radio(
        list(RUNNERS), value=defaults.runner, label="Runner", elem_id="runner",
        info="how both models' passes run: eager = transformers as it is, a growing cache; static = a preallocated cache, "
             "a few fixed shapes, one read from the device per step; compiled = static with each shape captured once "
             "(CUDA graphs on a GPU, torch.compile on a CPU: minutes the first time). Same tokens; only speed changes. "
             "Default: measured fastest here, start-up counted. With the w8a8 kernel, compiled made speculative runs "
             "1.17x faster once its ~4 minutes of compiling were paid (a 2-core Intel Xeon; docs/benchmarks.md).",
    )
    with gr.Row():
        page.adaptive = gr.Checkbox(defaults.adaptive, label="Adaptive K (+2 after a full accept, -1 otherwise)")
        page.cost_k = gr.Checkbox(defaults.cost_k, label="K from this machine's pass costs (0 where drafting would not pay)",
                                  elem_id="k-policy-cost")
    with gr.Row():
        page.top_p = gr.Slider(0.05, 1, value=defaults.top_p, step=0.05, label="Top-p")
        page.top_k = gr.Number(defaults.top_k, precision=0, minimum=0, label="Top-k (0 = off)")
        page.seed = gr.Number(defaults.seed, precision=0, minimum=0, label="Seed", elem_id="seed")
    engine_choice.section(page)
    with gr.Row():
        lossy_off = device_offer.lossy_lane(device)
        page.plain_int4 = gr.Checkbox(defaults.lossy, label="Plain decoding, int4 target (lossy)", elem_id="plain-int4",
                                      interactive=lossy_off is None, info=f"not offered on {device.type}: {lossy_off}" if lossy_off else None)
        page.show_rejected = gr.Checkbox(defaults.show_rejected, label="Show rejected draft tokens", elem_id="show-rejected")


def wire(page: Page) -> None:
    """The label follows every Advanced value as it changes (a new pair's draft variant too)."""
    def relabel(*values):
        return gr.update(label=summary(AdvancedValues(*values)))

    # One listener for every control, one call at a time: two quick changes (a box typed in, a
    # checkbox ticked) are relabelled in the order they were made, so an older call, carrying the
    # values of its moment, never finishes last and leaves a stale line.
    gr.on([control.change for control in page.advanced_fields], relabel, page.advanced_fields, page.advanced,
          concurrency_limit=1, concurrency_id="advanced-summary", show_progress="hidden")
