"""The bench's faithfulness figures: every plain run (ours on each target kernel, a real engine's own
plain decoding) against plain greedy decoding of the dense target, the `bf16` kernel
(specdec.measure.faithfulness says what the two figures mean).

The reference is the bf16 kernel's plain output on each prompt, so the bench runs that kernel
first when it is among those asked for; without it nothing is compared (the figures stay None)."""

from __future__ import annotations

import statistics
from dataclasses import replace

from specdec.bench.policies import mode_config
from specdec.engines.bench_servers import OWN_PLAIN
from specdec.engines.ours import OurSource
from specdec.measure.faithfulness import faithfulness

REFERENCE_KERNEL = "bf16"  # the dense target as converted from the GGUF: what every kernel is judged against


def reference_first(kernels: list[str]) -> list[str]:
    """The kernels in the order the bench runs them: the reference first, the others as given."""
    return sorted(kernels, key=lambda name: name != REFERENCE_KERNEL)


def is_plain(mode: str) -> bool:
    """Whether `mode`'s output is judged against the reference: our plain decoding, or a real engine's."""
    return mode == "plain" or mode in OWN_PLAIN.values()


def judge(plan, pid: str, prompt_ids: list[int], runs: dict, results: list, kernel: str) -> None:
    """Fill `departs_bf16_at` and `top1_agree_bf16` of one prompt's plain results (`results`, run on
    `kernel`); on the reference kernel, keep its plain output as the prompt's reference first."""
    if kernel == REFERENCE_KERNEL:
        plan.references[pid] = runs["plain"][0]["ids"]
    reference = plan.references.get(pid)
    if reference is None:
        return
    for result in results:
        if not is_plain(result.mode):
            continue
        key = (pid, result.mode, kernel)  # the predictions do not depend on the runner: measured once
        if key not in plan.forced:
            source = forcing_source(plan, result.mode, kernel)
            plan.forced[key] = source.forced_predictions(prompt_ids, reference) if source is not None else None
        predicted = plan.forced[key]
        figures = faithfulness(runs[result.mode][0]["ids"], reference, predicted)
        result.departs_bf16_at, result.top1_agree_bf16 = figures.first_departure, figures.top1_agreement


def forcing_source(plan, mode: str, kernel: str):
    """The source that can say `mode`'s top-1 along a given text, or None (a server that runs as a
    block is stopped by now; a source that cannot force tokens)."""
    if mode == "plain":
        config = replace(mode_config("plain", plan.k, plan.max_new_tokens, plan.schedule), target_kernel=kernel)
        return OurSource(plan.pair, config)
    served = plan.servers.get(mode)
    return served.source if served is not None and served.source.capabilities.forces_tokens else None


def summary(results: list) -> dict:
    """mode -> the mean top-1 agreement over prompts and the departure index per prompt, for the plain
    modes among `results` (one lane's: a real engine's under the lane it ran beside)."""
    out = {}
    for mode in [m for m in dict.fromkeys(r.mode for r in results) if is_plain(m)]:
        rows = [r for r in results if r.mode == mode and r.top1_agree_bf16 is not None]
        if rows:
            out[mode] = {"top1_agree_bf16": statistics.fmean(r.top1_agree_bf16 for r in rows),
                         "departs_bf16_at": {r.prompt: r.departs_bf16_at for r in rows}}
    return out
