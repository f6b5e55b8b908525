"""The bench's faithfulness figures: every plain run (ours on each target kernel, a real engine's own
plain decoding) against plain greedy decoding of the dense target, the `dense` kernel
(specdec.measure.faithfulness says what the two figures mean).

The reference is the dense kernel's plain output on each prompt, so the bench runs that kernel
first when it is among those asked for; without it nothing is compared (the figures stay None)."""

from __future__ import annotations

import statistics
from dataclasses import replace

from specdec.bench.policies import mode_config
from specdec.engines.bench_servers import OWN_PLAIN
from specdec.engines.ours import OurSource
from specdec.measure.compare import departure, first_difference, tie_bound
from specdec.measure.faithfulness import LISTED, faithfulness, kl, kl_top, listed
from specdec.kernels.faithfulness_record import REFERENCE_KERNEL


def reference_first(kernels: list[str]) -> list[str]:
    """The kernels in the order the bench runs them: the reference first, the others as given."""
    return sorted(kernels, key=lambda name: name != REFERENCE_KERNEL)


def is_plain(mode: str) -> bool:
    """Whether `mode`'s output is judged against the reference: our plain decoding, or a real engine's."""
    return mode == "plain" or mode in OWN_PLAIN.values()


def judge(plan, pid: str, prompt_ids: list[int], runs: dict, results: list, kernel: str) -> None:
    """Fill `departs_dense_at`, `top1_agree_dense`, `top1_agree_dense_untied`, `kl_dense` and
    `kl_dense_top` of one prompt's plain results (`results`, run on `kernel`); on the reference kernel,
    keep its plain output as the prompt's reference first, its log-probabilities along it, and the
    positions where it is tied (its own top-2 logits within the tie margin of the pair's dtype), all
    from the same teacher-forced pass as its predictions."""
    if kernel == REFERENCE_KERNEL:
        reference = plan.references[pid] = runs["plain"][0]["ids"]
        forced = forcing_source(plan, "plain", kernel).forced_pass(prompt_ids, reference)
        plan.forced[pid, "plain", kernel] = (forced.predicted, 0.0, 0.0)  # the reference against itself: KL 0
        plan.reference_logprobs[pid] = forced.logprobs
        tie = tie_bound(None, plan.pair.dtype_name)  # the reference's rounding: a tie in its dtype, batch-invariant or not
        plan.ties[pid] = [m <= tie for m in forced.margins]
    reference = plan.references.get(pid)
    if reference is None:
        return
    for result in results:
        if not is_plain(result.mode):
            continue
        key = (pid, result.mode, kernel)  # the predictions do not depend on the runner: measured once
        if key not in plan.forced:
            plan.forced[key] = forced_figures(forcing_source(plan, result.mode, kernel), prompt_ids, reference,
                                              plan.reference_logprobs[pid])
        predicted, result.kl_dense, result.kl_dense_top = plan.forced[key]
        figures = faithfulness(runs[result.mode][0]["ids"], reference, predicted, plan.ties.get(pid))
        result.departs_dense_at, result.top1_agree_dense = figures.first_departure, figures.top1_agreement
        result.top1_agree_dense_untied, result.dense_tied = figures.top1_agreement_untied, figures.tied


def forced_figures(source, prompt_ids: list[int], reference: list[int], reference_logprobs) -> tuple:
    """(top-1 predictions, KL from the reference, its top-20 lower bound) of one source along the
    reference; None for what the source cannot say (specdec.measure.faithfulness)."""
    if source is None:
        return None, None, None
    if hasattr(source, "forced_pass"):  # ours: the whole distribution at every position
        forced = source.forced_pass(prompt_ids, reference)
        return forced.predicted, kl(reference_logprobs, forced.logprobs), kl_top(reference_logprobs, listed(forced.logprobs))
    if hasattr(source, "forced_tops"):  # a server: its most likely tokens' log-probabilities
        predicted, tops = source.forced_tops(prompt_ids, reference, LISTED)
        return predicted, None, kl_top(reference_logprobs, tops)
    return source.forced_predictions(prompt_ids, reference), None, None


def describe_difference(result, first: dict, reference: dict, plain: dict, dtype_name: str, device: str = "cpu") -> None:
    """Where a run (`first`, its first repeat) leaves the run it is judged against: for the lossy
    lane, our plain run on the dense target (`plain`), its departure and agreement over 64 tokens;
    for an exact mode that was not identical to its plain run (`reference`: ours, or a real engine's
    own), the first difference and whether the top-2 margin there, reported by the kernel that ran, makes
    it a tie by that kernel's own bound (specdec.measure.compare.tie_bound: none on a batch-invariant kernel)."""
    if result.mode == "plain_int4":
        d = departure(first["events"], plain["events"], dtype_name)
        result.first_difference = None if d.difference is None else {
            "index": d.difference.index, "lossy_token": d.difference.spec_token, "exact_token": d.difference.plain_token,
            "lossy_text": d.difference.spec_text, "exact_text": d.difference.plain_text}
        result.agree_first_64 = d.agree
    elif result.identical_to_plain is False and "events" in first:
        kernel = result.target_kernel if result.runner else None  # ours; transformers' and real engines' are judged by dtype
        d = first_difference(first["events"], reference["events"], dtype_name, kernel, device)
        result.first_difference = {"index": d.index, "token": d.spec_token, "plain_token": d.plain_token, "text": d.spec_text,
                                   "plain_text": d.plain_text, "margin": d.margin, "is_tie": d.is_tie, "kernel": d.kernel,
                                   "bound": d.bound}


def forcing_source(plan, mode: str, kernel: str):
    """The source that can say `mode`'s top-1 along a given text, or None (a server that runs as a
    block is stopped by now; a source that cannot force tokens)."""
    if mode == "plain":
        config = replace(mode_config("plain", plan.k, plan.max_new_tokens, plan.schedule), target_kernel=kernel)
        return OurSource(plan.pair, config)
    served = plan.servers.get(mode)
    return served.source if served is not None and served.source.capabilities.forces_tokens else None


def mean_of(values) -> float | None:
    """The mean over prompts of a figure measured on every one of them; None where any is missing."""
    values = list(values)
    return None if not values or any(v is None for v in values) else statistics.fmean(values)


def summary(results: list) -> dict:
    """mode -> the mean top-1 agreement over prompts (over all positions, and over those where dense is
    not tied), the tied positions in all, the departure index per prompt, and the mean KL divergence
    from dense and its top-20 lower bound (specdec.measure.faithfulness), for the plain modes among
    `results` (one lane's: a real engine's under the lane it ran beside)."""
    out = {}
    for mode in [m for m in dict.fromkeys(r.mode for r in results) if is_plain(m)]:
        rows = [r for r in results if r.mode == mode and r.top1_agree_dense is not None]
        if rows:
            untied = [r.top1_agree_dense_untied for r in rows if r.top1_agree_dense_untied is not None]
            out[mode] = {"top1_agree_dense": statistics.fmean(r.top1_agree_dense for r in rows),
                         "top1_agree_dense_untied": statistics.fmean(untied) if untied else None,
                         "dense_tied": sum(r.dense_tied or 0 for r in rows),
                         "departs_dense_at": {r.prompt: r.departs_dense_at for r in rows},
                         "kl_dense": mean_of(r.kl_dense for r in rows), "kl_dense_top": mean_of(r.kl_dense_top for r in rows)}
    return out
