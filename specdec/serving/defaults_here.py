"""What a run starts on when nothing is named: measured on this machine where it can be, else the
recorded table of machine kinds (specdec.kernels.machine_defaults).

The recorded table is keyed by a CPU flag that cannot tell an Intel Xeon with AMX from an AMD EPYC
without it, and the fastest configuration differs between them (the int4 draft costs 0.19 of a
w8a8 step on the one and 0.57 on the other). So on a CPU the app's start (specdec.serving.startup)
and `python -m specdec defaults` time here what the candidates cost: every offered target kernel's
passes (specdec.kernels.device_offer: a kernel added there becomes a candidate by itself), every
offered draft variant's pass and the trained head's step, through the cost tables
(specdec.measure.cost_table, cached per machine), within BUDGET_S; specdec.measure.choose predicts each
configuration's tokens/s and picks the fastest. The choice is kept beside the cost tables, so a
second start reads it at once, and `start_defaults` is the one function every default reads
(the page's controls, generate, bench, the preload). Where nothing was measured (a GPU, or a CPU
before its first start) it gives the recorded table's entry. A choice file that is missing or
cannot be trusted, or that lacks a kernel offered now, is measured again.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

from specdec.core.recorded_acceptance import recorded_pair
from specdec.core.variant_names import native_kernel, variant_parts
from specdec.kernels import device_offer
from specdec.kernels.machine_defaults import MachineDefaults, defaults_for
from specdec.kernels.target_kernels import kernel_target
from specdec.measure import choose, cost_table
from specdec.models.bundle import cache_root

# The most a start spends measuring; what is left is said, and measured at the next start (the
# tables measured so far are kept). 40 s reaches the recorded kernel, w4a8 and the head, and most
# draft variants, on 2 cores with the embedded pair: a fresh clone's first start serves the page in
# about 90 s to two minutes, pip's installs included, where everything (about 100 s) would take three.
# No item starts after it, but a head; one begun finishes (the library's kernels, built from their disk
# cache and timed together, take about 20 s; built from scratch on a new machine, up to a minute).
BUDGET_S = 40.0
BUDGET = "over the time budget"  # the reason given for what the budget left out (measured at the next start)
# Rounds of the library's kernels' timing (the cost tables' usual 3 elsewhere): the choice between
# `w4a8` and `w8a8` with the head turns on their checks of 3 tokens, and one median of 3 rounds on
# a busy machine had `w4a8`'s at 1.19 of its decode step (usually 1.15), which turned it. Each round
# costs about 2 s for the two kernels.
KERNEL_REPEATS = 5


def choice_path(pair_name: str, device) -> Path:
    folder = cost_table.machine_folder(cost_table.machine(device))
    return cache_root() / "costs" / folder / f"{re.sub(r'[^A-Za-z0-9.-]+', '_', pair_name)}.defaults.json"


def measurable(pair_name: str, device) -> str:
    """"" where the defaults of this pair are measured on this device, else why not: only on a CPU,
    and only for the pair whose drafters' acceptance is recorded (the prediction needs it)."""
    if device is None or device.type != "cpu":
        return f"not measured on {getattr(device, 'type', 'this device')}: the recorded table's entry for its kind"
    if pair_name != recorded_pair():
        return f"not measured for {pair_name}: its drafters' acceptance is not recorded (only {recorded_pair() or 'no pair'}'s is)"
    return ""


def read_choice(pair_name: str, device) -> choose.Measured | None:
    """The choice measured here for this pair, or None (none, or a file that cannot be trusted)."""
    if measurable(pair_name, device):
        return None
    try:
        return choose.from_json(json.loads(choice_path(pair_name, device).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def start_defaults(pair_name: str, device) -> MachineDefaults:
    """What a run of this pair starts on here: the measured choice where there is one, else the
    recorded entry for this kind of machine."""
    measured = read_choice(pair_name, device)
    return measured.defaults() if measured is not None else defaults_for(device, pair_name)


def complete(measured: choose.Measured | None, device, head: str = "") -> bool:
    """Whether a kept choice covers every kernel offered now, nothing was left to the budget, and it
    was predicted for the head offered now (`head`: its digest; a new head file is measured again)."""
    if measured is None or measured.head != head:
        return False
    kernels = {c.target_kernel for c in measured.candidates} | {k.split(" ", 1)[1] for k in measured.skipped if k.startswith("kernel ")}
    return set(device_offer.target_kernels(device).names) <= kernels and BUDGET not in measured.skipped.values()


def ensure(pair, progress: bool = False, budget_s: float = BUDGET_S) -> choose.Measured | None:
    """The choice for this pair here: kept, or measured now (None where nothing is measured)."""
    if measurable(pair.name, pair.device):
        return None
    kept = read_choice(pair.name, pair.device)
    return kept if complete(kept, pair.device, offered_head_figures(pair)[0]) else measure_here(pair, budget_s, progress)


def _first(names, first: str) -> list[str]:
    return sorted(names, key=lambda name: name != first)  # the recorded default first: measured even on a short budget


def _cheap_first(variant: str) -> tuple:
    """The variants likeliest to be cheap first (a smaller head, then fewer bits), so that a short
    budget still times the ones drafting can pay with."""
    bits, head_tokens = variant_parts(variant)
    return (head_tokens is None, bits or 16)


def plan(pair) -> list[tuple[str, tuple[str, ...]]]:
    """What is timed, in order: ("kernel", names), ("head", (kernel,)), ("draft", (variant,)). The
    recorded kernel and the other kernels of this project's library first, timed together (their
    tables take seconds, and timed round by round a slow spell of the machine falls on all of them
    alike: passcost.measure_targets), then the heads beside them (a head step takes
    milliseconds and its c is the smallest), then every draft variant (a few seconds each: whether
    drafting pays is what the choice turns on), and last the kernels whose table can take a minute
    (the dense target), each with its head."""
    fallback = defaults_for(pair.device, pair.name)
    first, *others = _first(device_offer.target_kernels(pair.device).names, fallback.target_kernel)
    together = (first, *[k for k in others if native_kernel(k)])
    slow = [k for k in others if not native_kernel(k)]
    steps = [("kernel", together)] + [("head", (k,)) for k in together]
    if pair.draft is not None:
        variants = sorted(device_offer.draft_variants(pair.device).names, key=_cheap_first)
        steps += [("draft", (v,)) for v in _first(variants, fallback.draft_variant)]
    return steps + [step for k in slow for step in (("kernel", (k,)), ("head", (k,)))]


def measure_here(pair, budget_s: float = BUDGET_S, progress: bool = False, refresh: bool = False) -> choose.Measured:
    """Time every candidate's costs (cost tables from the cache where they are), choose, keep the
    choice. What this measurement built is dropped again, except that the recorded kernel and draft
    variant stay built until the choice is made, and the chosen ones, where built, after it: the start
    runs on them, and building them again would take it about 20 s more."""
    from tqdm import tqdm

    start, steps = time.monotonic(), plan(pair)
    tables, drafts, heads, skipped = {}, {}, {}, {}
    built_before = (set(pair.built.kernels), set(pair.built.drafts))
    fallback = defaults_for(pair.device, pair.name)
    likely = ({fallback.target_kernel}, {fallback.draft_variant})  # the recorded entry: kept built until the choice is made
    bar = tqdm(total=len(steps), unit="item", desc=f"measuring {pair.name} on this machine", disable=not progress)
    for what, names in steps:
        labels = [f"{what} {name}" for name in names]
        if tables and what != "head" and time.monotonic() - start > budget_s:
            # The first kernels are always timed (a choice needs one), and so is the head of each kernel
            # timed: its step takes milliseconds, and where building the kernels took the whole budget
            # (a new machine: about 64 s on a 2-core AMD EPYC) the start would otherwise run plain steps.
            skipped.update(dict.fromkeys(labels, BUDGET))
        elif what == "head" and (names[0] not in tables or "head" in skipped):
            pass  # no table for its kernel, or no head at all
        else:
            try:
                if what == "kernel":
                    skipped.update(_time_kernels(pair, names, tables, refresh))
                else:
                    _time_one(pair, what, names[0], tables, drafts, heads, refresh)
            except (ValueError, RuntimeError, OSError) as err:
                skipped.update({"head" if what == "head" else label: str(err).split("\n")[0] for label in labels})
            _drop_built(pair, built_before, likely)
        bar.update()
    bar.close()
    if not tables:
        raise ValueError(f"nothing could be measured for {pair.name} here: {'; '.join(skipped.values())}")
    digest, prior = offered_head_figures(pair)
    found = choose.candidates(tables, drafts, heads, head_alpha=prior)
    measured = choose.Measured(pair.name, cost_table.machine_folder(cost_table.machine(pair.device)), pair.dtype_name,
                               tuple(found), choose.fastest(found), skipped, time.monotonic() - start,
                               defaults_for(pair.device, pair.name).draft_variant, digest)
    cost_table._write_json(choice_path(pair.name, pair.device), measured.as_json())
    keep_chosen_table(pair, measured, tables, drafts)
    _drop_built(pair, built_before, ({measured.chosen.target_kernel}, {measured.variant}))  # what the start runs on stays
    return measured


def offered_head_figures(pair) -> tuple[str, float | None]:
    """(the tensors digest, the validation prior) of the head this pair is offered; ("", None) without one."""
    from specdec.kernels.head_offer import offered_head, validation_prior

    stored = offered_head(pair).stored
    return ("", None) if stored is None else (stored.digest, validation_prior(stored.record))


def keep_chosen_table(pair, measured: choose.Measured, tables: dict, drafts: dict) -> None:
    """The cost table the start's runs will read (its kernel and draft variant), put together from
    the figures that chose it (the kernel's target passes, the variant's draft pass) and the
    variant's catch-ups, where the table kept there holds other figures: the cost policy then prices exactly
    what the choice was predicted from, and the first run measures nothing."""
    kernel, variant = measured.chosen.target_kernel, measured.variant
    path = cost_table.table_path(pair.name, kernel, variant, pair.dtype_name, pair.device, choose.RUNNER)
    if variant not in drafts:
        return
    feeds = cost_table.draft_feeds(pair, variant, choose.RUNNER)  # timed for the chosen variant alone (a second or two)
    chosen = replace(tables[kernel], draft_s=drafts[variant].step_s, draft_feed_s=feeds, head_s=None, head_first_s=None)
    kept = cost_table.read(path)
    if kept is not None and (kept.target_s, kept.draft_s, kept.draft_feed_s) == (chosen.target_s, chosen.draft_s, chosen.draft_feed_s):
        return
    key = {"pair": pair.name, "target_kernel": kernel, "draft_variant": variant, "dtype": pair.dtype_name, "runner": choose.RUNNER}
    cost_table.keep(path, chosen, key, cost_table.machine(pair.device))


def _time_kernels(pair, names: tuple[str, ...], tables: dict, refresh: bool) -> dict[str, str]:
    """The kernels' tables into `tables`, those not kept timed together; returns "kernel <name>" ->
    why, for each kernel that could not be built here (the others are timed without it)."""
    failed, runnable = {}, {}
    for name in names:
        path = cost_table.table_path(pair.name, name, cost_table.NO_DRAFT, pair.dtype_name, pair.device, choose.RUNNER)
        try:
            if refresh or cost_table.known(path) is None:
                kernel_target(pair, name)  # built (and kept on the pair) before the timing, so that a failure leaves out this kernel alone
        except (ValueError, RuntimeError, OSError) as err:
            failed[f"kernel {name}"] = str(err).split("\n")[0]
            continue
        runnable[name] = lambda name=name: kernel_target(pair, name)
    if runnable:
        tables.update(cost_table.measure_together(pair, runnable, runner=choose.RUNNER, refresh=refresh, repeats=KERNEL_REPEATS))
    return failed


def _time_one(pair, what: str, name: str, tables: dict, drafts: dict, heads: dict, refresh: bool) -> None:
    if what == "draft":
        drafts[name] = cost_table.draft_cost(pair, name, choose.RUNNER, refresh=refresh)
    else:
        from specdec.engines.assemble import head_source

        path = cost_table.table_path(pair.name, name, cost_table.NO_DRAFT, pair.dtype_name, pair.device, choose.RUNNER)
        heads[name] = cost_table.head_cost(pair, path, head_source(pair, name), tables[name].streamed_bytes)


def _drop_built(pair, before: tuple[set, set], keep: tuple[set, set]) -> None:
    """Drop the kernels and draft variants built for the measurement alone, but those in `keep`
    (kernels, variants): holding every one at once would need several copies of the models in memory."""
    kernels, drafts = before[0] | keep[0], before[1] | keep[1]
    for name in [k for k in pair.built.kernels if k not in kernels]:
        del pair.built.kernels[name]
    for name in [v for v in pair.built.drafts if v not in drafts]:
        del pair.built.drafts[name]
