"""The cost table: what one target pass over 1, 2, 3, 4, 6, 8, 12, 16 tokens and one draft step
cost on this machine, for one (pair, target kernel, draft variant, dtype, runner). The cost K
policy (specdec.core.k_policy) chooses K from it. A runner changes what a pass costs (the
static runner pads a check to its fixed shapes: specdec.core.runners.static_model), so each runner has
its own table.

The draft step is kept per drafter: the draft model's one-token pass with its weights cached
(`draft_s`: each pass of a step after the first) and its first passes of a step over as many tokens
as the target's (`draft_feed_s`: the first pass feeds every token the draft model has not seen, and
is timed after the caches were emptied, as the target's pass leaves them), and the trained
head's drafts (one pair through its layer, then its lm_head rows, timed as a run makes them by
passcost.time_head_step): `head_first_s`, the first of a step, after the target's pass has emptied
the caches, and `head_s`, each further one. A head's drafts are timed the first time a run with
that head asks for the table and kept in the same file, keyed by the digest of the head file's
tensors: another head file is timed anew, the same file is not (nor one kept without its first
draft's figure, from before it was timed apart). Measured, not assumed: the cost policy's K for the head rests on it.

Measured once (specdec.measure.passcost times the passes: medians, sizes interleaved over the repeats) and
cached as JSON under `<cache root>/costs/<machine>/`, where <machine> names what decides the
figures: the CPU model and the flags that change the kernels (AVX2, AVX-512, AVX-512 BF16, AMX)
and the build of this project's CPU kernels (their sources and compiler: a changed kernel is timed
anew), or the GPU, the torch version and the thread count. `measure(..., refresh=True)` measures again.
Measuring the embedded pair costs about a minute on a 2-core AVX2 CPU (fp32 target, about 0.3 s
per one-token pass); tiny-random, a fraction of a second.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import torch

from specdec.models import machine as machine_facts  # this module's machine() is what keys a cost table
from specdec.models.bundle import cache_root
from specdec.measure.passcost import (DraftCost, PassCosts, filler_ids, measure_models, measure_targets, passes_to_time,
                                      time_draft, time_draft_feeds, time_head_step)

FORMAT = "specdec-costs"
VERSION = 5  # 5: the lean pass's joined products and the attention's AVX-512 path (3 to 4% faster, the same bits); 4: the eager runner's passes through lean_pass (faster, the same bits); 3: a step's first draft pass timed with the caches emptied; 2: its catch-ups (draft_feed_s); older: measured again
SIZES = (1, 2, 3, 4, 6, 8, 12, 16)  # tokens in one target pass: K + 1 for K = 0..15
CONTEXT = 200  # cached positions while timing: a prompt and some output
REPEATS = 3
HEAD_REPEATS = 9  # a head step takes milliseconds: more rounds for a steadier median
CPU_FLAGS = (*machine_facts.REPORTED_FLAGS, "amx_int8")  # the flags that change which kernels run (part of a table's key)

_tables: dict[Path, PassCosts] = {}  # measured or read in this process, by file (without a head's step)
_drafts: dict[Path, DraftCost] = {}  # a draft variant's passes alone, by file, measured or read in this process
_feeds: dict[Path, tuple[float, ...]] = {}  # a draft variant's catch-up passes alone, by file, measured or read in this process
NO_DRAFT = "none"  # the draft variant of a table of the target's passes alone
_head_steps: dict[tuple[Path, str], DraftCost] = {}  # (table file, head digest) -> its drafts' cost, timed or read in this process


def machine(device: torch.device) -> dict:
    """What decides the figures of a cost table."""
    info = {"torch": torch.__version__, "threads": torch.get_num_threads(), "device": device.type}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        return info
    flags = machine_facts.cpu_flags()
    info["cpu"] = machine_facts.cpu_model()
    info["cpu_flags"] = [f for f in CPU_FLAGS if f in flags]
    info["kernels"] = kernel_build()
    return info


@functools.cache
def kernel_build() -> str:
    """The key of this project's CPU kernel library as it would be built here (w8a8, w4a8, the
    attention rows: specdec/kernels/w8a8_build.py), or "none" without a compiler."""
    from specdec.kernels import w8a8_build

    cxx = w8a8_build.compiler()
    return w8a8_build.build_key(cxx) if cxx else "none"


def machine_folder(info: dict) -> str:
    """A readable folder name for a machine, with a hash of everything in `info`."""
    name = info.get("gpu") or info.get("cpu", "")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or info["device"]
    digest = hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()[:10]
    return f"{slug}-{digest}"


def table_path(pair_name: str, kernel: str, draft_variant: str, dtype: str, device: torch.device, runner: str = "eager") -> Path:
    pair_slug = re.sub(r"[^A-Za-z0-9.-]+", "_", pair_name)
    return cache_root() / "costs" / machine_folder(machine(device)) / f"{pair_slug}.{kernel}.{draft_variant}.{dtype}.{runner}.json"


def measure(pair, *, kernel: str = "dense", target=None, draft_variant: str = "dense", runner: str = "eager",
            refresh: bool = False, repeats: int = REPEATS, progress: bool = False, head=None) -> PassCosts:
    """The cost table for this pair, target kernel, draft variant, runner and the pair's dtype: from
    this process, else from the cache on disk, else (or with refresh) measured and written there.

    target: the target module as the kernel runs it, or a callable that returns it (called only
    when measuring); None: the pair's own target. The draft is the draft variant as run
    (specdec.kernels.variants). progress: a progress bar on stderr while measuring.
    head: the run's trained head (a HeadSource): the table then carries its drafts (head_first_s, head_s)."""
    path = table_path(pair.name, kernel, draft_variant, pair.dtype_name, pair.device, runner)
    costs = _model_table(pair, path, kernel, target, draft_variant, runner, refresh, repeats, progress)
    if head is None:
        return costs
    return with_head(costs, head_cost(pair, path, head, costs.streamed_bytes))


def with_head(costs: PassCosts, head: DraftCost) -> PassCosts:
    """The table with a head's drafts."""
    return replace(costs, head_s=head.step_s, head_first_s=head.first_s)


def _model_table(pair, path, kernel, target, draft_variant, runner, refresh, repeats, progress) -> PassCosts:
    costs = None if refresh else known(path)
    if costs is not None:
        return costs
    if target is None:
        module = pair.target
    elif isinstance(target, torch.nn.Module):
        module = target
    else:
        module = target()
    draft = None
    if pair.draft is not None and draft_variant != NO_DRAFT:
        from specdec.kernels.variants import draft_model

        draft = draft_model(pair, draft_variant)
    context = filler_ids(pair.vocab_size, CONTEXT)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=passes_to_time(SIZES, repeats, draft is not None), unit="pass",
                   desc=f"pass costs of {pair.name} ({kernel} target, {draft_variant} draft, {runner} runner)")
    try:
        costs = measure_models(module, draft, pair.vocab_size, context, SIZES, repeats, tick=bar.update if bar else None,
                               runner=runner)
    finally:
        if bar is not None:
            bar.close()
    _store(pair, path, costs, kernel, draft_variant, runner)
    return costs


def measure_together(pair, kernels: dict, runner: str = "eager", refresh: bool = False, repeats: int = REPEATS) -> dict[str, PassCosts]:
    """The tables of several target kernels' passes alone (draft variant NO_DRAFT; kernels: name ->
    a callable returning the target as that kernel runs it, called only when measuring): each kept
    one read as `measure` reads it, the others timed together (passcost.measure_targets: round by
    round, so a slow spell of the machine falls on them alike and they compare) and written."""
    paths = {name: table_path(pair.name, name, NO_DRAFT, pair.dtype_name, pair.device, runner) for name in kernels}
    out = {name: None if refresh else known(path) for name, path in paths.items()}
    todo = [name for name, costs in out.items() if costs is None]
    if todo:
        timed = measure_targets({name: kernels[name]() for name in todo}, pair.vocab_size, filler_ids(pair.vocab_size, CONTEXT), SIZES, repeats, runner=runner)
        for name in todo:
            _store(pair, paths[name], timed[name], name, NO_DRAFT, runner)
            out[name] = timed[name]
    return out


def known(path: Path) -> PassCosts | None:
    """The table at `path` as this process has it, else as the file has it (None: neither)."""
    if path not in _tables:
        costs = read(path)
        if costs is None:
            return None
        _tables[path] = costs
    return _tables[path]


def _store(pair, path: Path, costs: PassCosts, kernel: str, draft_variant: str, runner: str) -> None:
    write(path, costs, {"pair": pair.name, "target_kernel": kernel, "draft_variant": draft_variant, "dtype": pair.dtype_name,
                        "runner": runner}, machine(pair.device))
    _tables[path] = costs
    for key in [k for k in _head_steps if k[0] == path]:  # a table measured anew is written without heads
        del _head_steps[key]


def head_cost(pair, path: Path, head, streamed: int | None) -> DraftCost:
    """The head's drafts (head: a HeadSource) as kept in the table at `path`, by the head file's
    digest: from this process, else from the file, else timed now and added to the file.
    streamed: the bytes the target's decode step reads (the table's streamed_bytes), which the
    head's first draft of a step is timed after (passcost.time_head_step)."""
    key = (path, head.digest)
    if key not in _head_steps:
        cost = read_head_steps(path).get(head.digest)
        if cost is None:
            cost = time_head_step(head, pair.dtype, pair.device, CONTEXT, HEAD_REPEATS, streamed)
            add_head_step(path, head.digest, cost)
        _head_steps[key] = cost
    return _head_steps[key]


def table_variant(config) -> str:
    """The draft variant of the table a run reads: its own where the draft model drafts, else NO_DRAFT.
    A run of the head or of prompt lookup alone never runs the draft model, so timing it (a dense draft
    takes about as long as the target's passes) would make its first run wait for nothing; and the
    target-only table is the one the measured defaults keep the head's drafts in."""
    return config.draft_variant if getattr(config, "uses_draft_model", True) else NO_DRAFT


def costs_for(pair, config, target=None, progress: bool = False, head=None) -> PassCosts:
    """The cost table a run with these settings needs (its target kernel, table_variant and runner;
    with the step of `head`, the run's HeadSource, when the head drafts)."""
    return measure(pair, kernel=getattr(config, "target_kernel", "dense"), target=target,
                   draft_variant=table_variant(config), runner=getattr(config, "runner", "eager"), progress=progress, head=head)


def head_cost_for(pair, config, head, streamed: int | None) -> DraftCost:
    """The drafts of `head` (a HeadSource) as kept with the cost table of these settings, timed now
    if they are not there (head_cost, after `streamed` bytes); the table itself is not measured for it."""
    path = table_path(pair.name, getattr(config, "target_kernel", "dense"), table_variant(config), pair.dtype_name, pair.device,
                      getattr(config, "runner", "eager"))
    return head_cost(pair, path, head, streamed)


def draft_path(pair_name: str, draft_variant: str, dtype: str, device: torch.device, runner: str = "eager") -> Path:
    pair_slug = re.sub(r"[^A-Za-z0-9.-]+", "_", pair_name)
    return cache_root() / "costs" / machine_folder(machine(device)) / f"{pair_slug}.draft.{draft_variant}.{dtype}.{runner}.json"


def draft_cost(pair, draft_variant: str, runner: str = "eager", refresh: bool = False, repeats: int = REPEATS) -> DraftCost:
    """This variant's one-token passes alone (whatever the target kernel: the draft does not read it),
    for comparing variants without timing the target again: the first of a step, timed with the
    caches emptied, and each further one. From this process, else the cache on disk (a file that
    cannot be trusted is measured again), else measured and written there."""
    from specdec.kernels.variants import draft_model

    path = draft_path(pair.name, draft_variant, pair.dtype_name, pair.device, runner)
    if not refresh and path in _drafts:
        return _drafts[path]
    cost = None if refresh else read_draft(path)
    if cost is None:
        context = filler_ids(pair.vocab_size, CONTEXT)
        model = draft_model(pair, draft_variant)
        (first,) = time_draft_feeds(model, pair.vocab_size, context, (1,), repeats, runner=runner)
        cost = DraftCost(first, time_draft(model, pair.vocab_size, context, repeats, runner=runner))
        _write_json(path, {"format": FORMAT, "version": VERSION, "machine": machine(pair.device),
                           "key": {"pair": pair.name, "draft_variant": draft_variant, "dtype": pair.dtype_name, "runner": runner},
                           "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "draft_s": cost.step_s,
                           "draft_first_s": cost.first_s})
        _feeds.pop(path, None)
    _drafts[path] = cost
    return cost


def draft_feeds(pair, draft_variant: str, runner: str = "eager", repeats: int = REPEATS) -> tuple[float, ...]:
    """This variant's first passes of a step over SIZES tokens (a PassCosts' draft_feed_s: its
    catch-ups, with the caches emptied), alone: from this process, else its draft file, else timed
    and added to that file. Timed apart from its one-token passes: a start compares every variant by
    those, and times the catch-ups of the one it chose."""
    from specdec.kernels.variants import draft_model

    path = draft_path(pair.name, draft_variant, pair.dtype_name, pair.device, runner)
    cost = draft_cost(pair, draft_variant, runner, repeats=repeats)  # the file the catch-ups are added to
    if path not in _feeds:
        feeds = read_draft_feeds(path)
        if feeds is None:
            context = filler_ids(pair.vocab_size, CONTEXT)
            feeds = tuple(time_draft_feeds(draft_model(pair, draft_variant), pair.vocab_size, context, SIZES, repeats,
                                           runner=runner))
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):  # gone since this process read it: written again whole
                data = {"format": FORMAT, "version": VERSION, "machine": machine(pair.device), "draft_s": cost.step_s,
                        "draft_first_s": cost.first_s}
            _write_json(path, {**data, "sizes": list(SIZES), "draft_feed_s": list(feeds)})
        _feeds[path] = feeds
    return _feeds[path]


def read_draft(path: Path) -> DraftCost | None:
    """A cached draft variant's passes, or None when there are none or they cannot be trusted."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        first, seconds = data["draft_first_s"], data["draft_s"]
        ok = data.get("format") == FORMAT and data.get("version") == VERSION and _positive(seconds) and _positive(first)
        return DraftCost(float(first), float(seconds)) if ok else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def read_draft_feeds(path: Path) -> tuple[float, ...] | None:
    """A cached draft variant's catch-up passes, or None when there are none or they cannot be trusted."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        feeds = tuple(float(t) for t in data["draft_feed_s"])
        ok = read_draft(path) is not None and tuple(data["sizes"]) == SIZES and len(feeds) == len(SIZES) and all(t > 0 for t in feeds)
        return feeds if ok else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write(path: Path, costs: PassCosts, key: dict, info: dict) -> None:
    """Write the table (the draft model's pass; no head's step yet) atomically."""
    _write_json(path, {
        "format": FORMAT, "version": VERSION, "key": key, "machine": info,
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "costs": {"sizes": list(costs.sizes), "target_s": list(costs.target_s), "draft_s": costs.draft_s,
                  "draft_feed_s": None if costs.draft_feed_s is None else list(costs.draft_feed_s),
                  "head_s": {}, "head_first_s": {}, "context": costs.context, "repeats": costs.repeats,
                  "streamed_bytes": costs.streamed_bytes, "read_rate": costs.read_rate},
    })


def keep(path: Path, costs: PassCosts, key: dict, info: dict) -> None:
    """Write the table in place of the one kept there (the heads' steps timed against it stay), and
    let this process read the new one."""
    heads = read_head_steps(path)
    write(path, costs, key, info)
    for digest, cost in heads.items():
        add_head_step(path, digest, cost)
    _tables[path] = costs


def add_head_step(path: Path, digest: str, cost: DraftCost) -> None:
    """Add a head's drafts to the table's file, under the head file's digest (no file: kept in this process only)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        c = data["costs"]
        c["head_s"] = {**c.get("head_s", {}), digest: cost.step_s}
        c["head_first_s"] = {**c.get("head_first_s", {}), digest: cost.first_s}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return
    _write_json(path, data)


def _write_json(path: Path, data: dict) -> None:
    """Atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(partial, path)


def read(path: Path) -> PassCosts | None:
    """A cached table, or None when there is none or it cannot be trusted (then it is measured again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            return None
        c = data["costs"]
        sizes, target_s, draft_s = tuple(int(n) for n in c["sizes"]), tuple(float(t) for t in c["target_s"]), c["draft_s"]
        if len(sizes) != len(target_s) or not sizes or not all(t > 0 for t in target_s):
            return None
        if draft_s is not None and not _positive(draft_s):
            return None
        feeds = None if draft_s is None else tuple(float(t) for t in c["draft_feed_s"])
        if feeds is not None and (len(feeds) != len(sizes) or not all(t > 0 for t in feeds)):
            return None
        limit = {name: c.get(name) if _positive(c.get(name)) else None
                 for name in ("streamed_bytes", "read_rate")}  # optional: a table without them shows no limit
        return PassCosts(sizes, target_s, None if draft_s is None else float(draft_s), int(c["context"]), int(c["repeats"]),
                         draft_feed_s=feeds, **limit)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def read_head_steps(path: Path) -> dict[str, DraftCost]:
    """The heads' drafts kept in a table's file, by head digest (entries that cannot be trusted, or
    that lack either figure, left out)."""
    try:
        c = json.loads(path.read_text(encoding="utf-8"))["costs"]
        steps, firsts = c.get("head_s", {}), c.get("head_first_s", {})
        return {str(d): DraftCost(float(firsts[d]), float(s)) for d, s in steps.items()
                if _positive(s) and _positive(firsts.get(d))}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _positive(value) -> bool:
    """A number above zero (what a kept time, or a count of bytes, must be to be trusted)."""
    return isinstance(value, (int, float)) and value > 0
