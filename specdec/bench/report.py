"""What the benchmark's runs add up to: summary figures, Leviathan's prediction, the printed table.

specdec/bench/runner.py runs the modes and hands over plain records; everything here only reads them.
"""

from __future__ import annotations

import math
import statistics


from specdec.bench.modes import OUR_MODES
from specdec.bench.policies import split_mode
from specdec.engines.bench_servers import OWN_PLAIN
from specdec.measure.compare import tie_bound
from specdec.measure.faithfulness import KL_TOP
from specdec.measure.metrics import measured_speedup, summarize, summarize_runs
from specdec.measure.positions import position_acceptance
from specdec.models.machine import REPORTED_FLAGS


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def fastest_exact(results: list) -> dict | None:
    """The fastest exact configuration (our modes but the lossy lane, on any kernel and runner;
    geomean tok/s over the prompts), its tokens/s over the fastest plain configuration of any kernel
    and runner and over each real engine's plain decoding in the same run; `speculative`: the same
    for the fastest of our modes that drafts (plain decoding left out). results: bench.Result records."""
    rates: dict[tuple[str, str, str], list[float]] = {}
    real_plain: dict[str, list[float]] = {}
    for r in results:
        if split_mode(r.mode)[0] in OUR_MODES and r.mode != "plain_int4":
            rates.setdefault((r.mode, r.target_kernel, r.runner), []).append(r.tok_s)
        elif r.mode in OWN_PLAIN.values():
            real_plain.setdefault(r.mode, []).append(r.tok_s)
    if not rates:
        return None
    rate = {key: geomean(values) for key, values in rates.items()}
    plain = max((v for (m, _, _), v in rate.items() if m == "plain"), default=None)
    others = {mode: geomean(values) for mode, values in real_plain.items()}

    def described(key: tuple[str, str, str]) -> dict:
        tok_s = rate[key]
        return {"mode": key[0], "target_kernel": key[1], "runner": key[2], "tok_s": tok_s,
                "over_fastest_plain": tok_s / plain if plain else None,
                "over_real_plain": {mode: tok_s / v for mode, v in others.items() if v}}

    out = described(max(rate, key=rate.get))
    drafting = [key for key in rate if key[0] != "plain"]
    out["speculative"] = described(max(drafting, key=rate.get)) if drafting else None
    return out


def lanes_summary(summaries: dict, results: list) -> dict:
    """The bench's summary: the first lane's figures, each lane's when there were several (by_kernel
    when only the kernel changed, by_lane "kernel runner" when the runner did), the fastest exact
    configuration. summaries: (kernel, runner) -> summarize_results' figures of that lane."""
    lanes = list(summaries)
    summary = dict(summaries[lanes[0]])
    if len({k for k, _ in lanes}) > 1 and len({r for _, r in lanes}) == 1:
        summary["by_kernel"] = {kernel: found for (kernel, _), found in summaries.items()}
    if len({r for _, r in lanes}) > 1:
        summary["by_lane"] = {f"{kernel} {runner}": found for (kernel, runner), found in summaries.items()}
    summary["fastest_exact"] = fastest_exact(results)
    return summary


def summarize_results(results: list, events: dict, modes, draft_gb: dict) -> dict:
    """results: bench.Result records; events: (prompt, mode) -> our engine's StepEvents;
    draft_gb: mode -> resident GB of the draft model that mode ran."""
    by = {(r.prompt, r.mode): r for r in results}
    prompts = list(dict.fromkeys(r.prompt for r in results))
    spec_mode = next((m for m in modes if m.split("@")[0] == "spec"), None)  # the first spec variant

    def ratio(mode: str | None, over: str) -> float | None:
        if mode not in modes or over not in modes:
            return None
        return geomean([by[p, mode].tok_s / by[p, over].tok_s for p in prompts])

    summary = {
        "speedup_vs_plain": {m: ratio(m, "plain") for m in modes if m != "plain"},
        "ratio_vs_hf_assisted": ratio(spec_mode, "hf_assisted"),
        "vs_hf_assisted": {m: ratio(m, "hf_assisted") for m in modes if m in by_mode_ours(modes)} if "hf_assisted" in modes else {},
        "ratio_best_vs_hf_assisted": ratio("best", "hf_assisted"),
        "ratio_vs_hf_assisted_cpulinear": ratio(spec_mode, "hf_assisted_cpulinear"),  # same kernels: the loops alone
        "ratio_lookup_vs_hf_lookup": ratio("lookup", "hf_lookup"),
        "all_identical_to_plain": {m: all(by[p, m].identical_to_plain for p in prompts) for m in modes
                                   if by[prompts[0], m].identical_to_plain is not None},  # None: a plain reference
        "speedup_vs_own_plain": {m: ratio(m, own) for m, own in OWN_PLAIN.items() if m in modes},
        "cost_ratio_c": cost_ratios(events, modes, prompts),
        "draft_memory_gb": draft_gb,
        "acceptance": {m: geo_acceptance(by, m, prompts) for m in modes if by[prompts[0], m].accepted_share is not None},
        "acceptance_by_position": pooled_positions(events, modes, prompts),
    }
    pairs = {p: (events[p, spec_mode], events[p, "plain"]) for p in prompts if (p, spec_mode) in events}
    summary["leviathan"] = leviathan(pairs) if pairs else None
    if "plain_int4" in modes:
        summary["plain_int4"] = {p: {"first_difference": by[p, "plain_int4"].first_difference,
                                     "agree_first_64": by[p, "plain_int4"].agree_first_64} for p in prompts}
    return summary


def exactness(results: list, kernel: str, dtype_name: str, device: str = "cpu") -> dict:
    """Whether our exact modes that draft kept plain's output on `kernel`, judged by the kernel's own
    rounding: a batch-invariant kernel must never depart; any other may depart only at a tie of its
    own top-2 logits (specdec.measure.compare.tie_bound). results: bench.Result records of one lane."""
    runs = [r for r in results if r.identical_to_plain is not None and split_mode(r.mode)[0] in OUR_MODES and r.mode != "plain_int4"]
    departed = [r for r in runs if not r.identical_to_plain]
    ties = [r for r in departed if (r.first_difference or {}).get("is_tie")]
    bound = tie_bound(kernel, dtype_name, device)
    invariant = bound is None
    return {"kernel": kernel, "batch_invariant": invariant, "tie_bound": bound, "runs": len(runs),
            "departures": len(departed), "ties": len(ties),
            "met": not departed if invariant else len(ties) == len(departed)}


def by_mode_ours(modes) -> list:
    """Our draft-model modes (spec, best, and their @variant forms)."""
    return [m for m in modes if m.split("@")[0] in ("spec", "best")]


def cost_ratios(events: dict, modes, prompts) -> dict:
    """mode -> median over prompts of c = drafting seconds per drafted token / plain decode step."""
    out = {}
    for mode in modes:
        cs = []
        for p in prompts:
            if (p, mode) not in events or (p, "plain") not in events:
                continue
            m, plain = summarize(events[p, mode]), summarize(events[p, "plain"])
            if m.drafted and m.draft_pass_s is not None and plain.target_pass_s:  # None: an engine that does not time drafting
                cs.append(m.draft_pass_s / plain.target_pass_s)
        if cs:
            out[mode] = statistics.median(cs)
    return out


def pooled_positions(events: dict, modes, prompts) -> dict:
    """mode -> accepted / tested at each draft position, the steps of every prompt counted together
    (a mean of per-prompt rates would weigh a prompt's few deep drafts like another's many)."""
    out = {}
    for mode in modes:
        pooled = position_acceptance([e for p in prompts for e in events.get((p, mode), [])])
        if pooled.steps:
            out[mode] = {"rates": list(pooled.rates), "tested": list(pooled.tested)}
    return out


def geo_acceptance(by: dict, mode: str, prompts) -> float | None:
    values = [by[p, mode].accepted_share for p in prompts if by[p, mode].accepted_share is not None]
    return statistics.fmean(values) if values else None


def leviathan(pairs: dict) -> dict:
    """Measured speedup of `spec` over `plain` against the three predictions of specdec.measure.metrics
    (the same functions the app and the CLI use), per prompt.

    Both sides leave the prompt out: the formulas model decoding, so `measured` here is the ratio
    of tokens/s after prefill (the events' elapsed time), not the whole-call ratio of the table.
    - textbook: (1 - a^(K+1)) / ((1 - a)(K c + 1)), a = alpha (per token), c = draft pass / decode step;
    - with_costs: the same with the measured verify cost (K+1-token pass / decode step) for the 1;
    - from_passes: measured tokens per pass x decode step / measured time of a step."""
    rows = {}
    for pid, (spec, plain) in pairs.items():
        m, p = summarize_runs(spec, plain), summarize(plain)
        if not m.drafted:
            continue
        predicted = {
            "textbook": m.predicted_speedup,
            "with_costs": m.predicted_speedup_with_verify_cost,
            "from_passes": m.predicted_speedup_from_passes,
        }
        measured = measured_speedup(m, p)  # prefill excluded on both sides
        rows[pid] = {
            "alpha": m.alpha, "accepted_share": m.accepted_share, "mean_k": m.mean_k, "c": m.cost_ratio_c,
            "tokens_per_pass": m.tokens_per_pass, "expected_tokens_per_pass": m.expected_tokens_per_pass,
            "verify_over_decode": m.verify_cost,  # cost of a K+1-token pass in decode steps
            "draft_pass_ms": 1000 * m.draft_pass_s, "decode_pass_ms": 1000 * m.decode_step_s, "verify_pass_ms": 1000 * m.verify_pass_s,
            "measured": measured,
            **{f"predicted_{k}": v for k, v in predicted.items()},
            **{f"measured_over_{k}": measured / v for k, v in predicted.items()},
        }
    out = {"per_prompt": rows, "c": statistics.median(r["c"] for r in rows.values()) if rows else None}
    for k in ("textbook", "with_costs", "from_passes"):
        out[f"measured_over_{k}"] = geomean([r[f"measured_over_{k}"] for r in rows.values()])
    return out


def table(report: dict) -> str:
    rows = report["results"]
    # x plain: our modes over our plain decoding on the same kernel; a real engine over its own plain decoding
    lane = {id(r): (r.get("target_kernel"), r.get("runner", "eager")) for r in rows}  # (kernel, runner)
    first = lane[id(rows[0])]
    plain = {(r["prompt"], lane[id(r)]): r["tok_s"] for r in rows if r["mode"] == "plain"}
    plain.update({(r["prompt"], r["mode"]): r["tok_s"] for r in rows if r["mode"] in OWN_PLAIN.values()})

    def reference(r):
        own = OWN_PLAIN.get(r["mode"], r["mode"] if r["mode"] in OWN_PLAIN.values() else None)
        return plain[r["prompt"], own] if own else plain.get((r["prompt"], lane[id(r)]), plain[r["prompt"], first])
    kernels, runners = len({k for k, _ in lane.values() if k}) > 1, len({r for _, r in lane.values() if r}) > 1
    label = {id(r): r["mode"] + lane_label(*lane[id(r)], kernels, runners) for r in rows}  # mode [kernel runner]
    width = max(22, *(len(v) for v in label.values()))
    head = f"{'prompt':<20} {'mode':<{width}} {'tokens':>6} {'seconds':>8} {'tok/s':>7} {'x plain':>7} {'same':>5} {'accept':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        same = "" if r["identical_to_plain"] is None else ("yes" if r["identical_to_plain"] else "NO")
        acc = "" if r["accepted_share"] is None else f"{r['accepted_share']:.0%}"
        line = (f"{r['prompt'][:20]:<20} {label[id(r)]:<{width}} {r['tokens']:>6} {r['seconds']:>8.2f} {r['tok_s']:>7.2f} "
                f"{r['tok_s'] / reference(r):>6.2f}x {same:>5} {acc:>6}")
        d = r.get("first_difference")
        if d and "lossy_text" in d:
            line += f"  departs at {d['index']}: {d['lossy_text']!r} for {d['exact_text']!r}; {r['agree_first_64']}/64 agree"
        elif d:
            why = "" if d["margin"] is None else f", {lane[id(r)][0] or 'the'} kernel's margin {d['margin']:.3f}{departure_label(d)}"
            line += f"  differs at {d['index']}: {d['text']!r} for {d['plain_text']!r}{why}"
        lines.append(line)
    return "\n".join(lines + [""] + summary_lines(report))


def summary_lines(report: dict) -> list[str]:
    """The table's closing lines: the summary's figures, then the machine."""
    s, lines = report["summary"], []
    lines.append("geomean speedup vs plain: " + ", ".join(f"{m} {v:.2f}x" for m, v in s["speedup_vs_plain"].items() if v))
    if s.get("speedup_vs_own_plain"):
        lines.append("geomean speedup vs the engine's own plain: " + ", ".join(f"{m} {v:.2f}x" for m, v in s["speedup_vs_own_plain"].items() if v))
    for key in ("ratio_vs_hf_assisted", "ratio_best_vs_hf_assisted", "ratio_vs_hf_assisted_cpulinear", "ratio_lookup_vs_hf_lookup"):
        if s[key]:
            lines.append(f"{key}: {s[key]:.2f}x")
    if s.get("vs_hf_assisted"):
        lines.append("geomean vs hf_assisted (stock draft): " + ", ".join(f"{m} {v:.2f}x" for m, v in s["vs_hf_assisted"].items() if v))
    if s["cost_ratio_c"]:
        lines.append("c (drafting per token / plain decode step, median): " + ", ".join(f"{m} {v:.3f}" for m, v in s["cost_ratio_c"].items()))
    if s.get("acceptance_by_position"):
        lines.append("acceptance by draft position 1..K (all prompts' steps): " + "; ".join(
            f"{m} " + " ".join("-" if r is None else f"{r:.0%}" for r in v["rates"]) for m, v in s["acceptance_by_position"].items()))
    if s["draft_memory_gb"]:
        lines.append("draft resident memory: " + ", ".join(f"{m} {v:.2f} GB" for m, v in s["draft_memory_gb"].items()))
    lines += fastest_lines(s.get("fastest_exact")) + exactness_lines(s) + faithfulness_lines(s)
    lev = s.get("leviathan")
    if lev and lev["c"] is not None:
        lines.append(f"spec measured/predicted (prefill excluded): textbook {lev['measured_over_textbook']:.2f}, with measured "
                     f"pass costs {lev['measured_over_with_costs']:.2f}, with measured costs and tokens per pass {lev['measured_over_from_passes']:.2f}")
    m = report["machine"]
    lines.append(f"machine: {m['cpu']}, {m['cores']} cores, CPU flags {' '.join(m['cpu_flags']) or 'none of ' + ' '.join(REPORTED_FLAGS)}, "
                 f"torch {m['torch']}, transformers {m['transformers']}, {m['device']}, target {m['dtype']}, draft {m['draft_dtype']}")
    return lines


def fastest_lines(fastest: dict | None) -> list[str]:
    """The fastest exact configuration, and the fastest that drafts, each against the fastest plain one
    and every real engine's plain decoding."""
    lines = []
    for what, f in (("fastest exact configuration", fastest), ("fastest speculative", (fastest or {}).get("speculative"))):
        if not f:
            continue
        over = [f"{f['over_fastest_plain']:.2f}x the fastest plain configuration"] if f["over_fastest_plain"] else []
        over += [f"{v:.2f}x {mode}" for mode, v in f["over_real_plain"].items()]
        lines.append(f"{what}: {f['mode']} on the {f['target_kernel']} target kernel, {f.get('runner') or 'eager'} runner, "
                     f"{f['tok_s']:.2f} tok/s (geomean over prompts)" + "".join(", " + o for o in over))
    return lines


def exactness_lines(s: dict) -> list[str]:
    """Per lane: did speculation keep plain's output, by the kernel's own rule (exactness above)."""
    lines = []
    for lane, ls in (s.get("by_lane") or s.get("by_kernel") or {None: s}).items():
        e = ls.get("exactness")
        if not e or not e["runs"]:
            continue
        name = lane or e["kernel"]
        if e["batch_invariant"]:
            rule = "batch-invariant, so speculative output must equal plain output bit for bit"
        else:
            rule = f"not batch-invariant, so speculative output may leave plain output at a tie (top-2 within {e['tie_bound']:g})"
        verdict = "met" if e["met"] else "NOT MET"
        lines.append(f"exact on {name}: {rule}; {e['runs'] - e['departures']} of {e['runs']} runs identical, "
                     f"{e['departures']} departed ({e['ties']} at a tie): {verdict}")
    return lines


def faithfulness_lines(s: dict) -> list[str]:
    """Each plain run against dense plain decoding: mean top-1 agreement under teacher forcing (over all
    positions, and over those where dense's own top-2 logits are not tied), the mean KL divergence from
    dense along the same text, and where the greedy text first departs, per prompt (- where it never does)."""
    lanes = s.get("by_lane") or s.get("by_kernel") or {None: s}
    lines = []
    for lane, ls in lanes.items():
        for mode, f in (ls.get("faithfulness") or {}).items():
            where = ", ".join("-" if i is None else str(i) for i in f["departs_dense_at"].values())
            label = mode if mode != "plain" or lane is None else f"plain [{lane}]"
            untied = f.get("top1_agree_dense_untied")
            where_untied = "" if untied is None else (f", {untied:.3f} where dense is not tied "
                                                      f"({f['dense_tied']} tied positions on {len(f['departs_dense_at'])} prompts)")
            lines.append(f"faithful to dense plain: {label} top-1 {f['top1_agree_dense']:.3f}{where_untied}{kl_words(f)}, departs at {where}")
    return lines


def kl_words(f: dict) -> str:
    """', KL from dense 0.00120 nats (top-20 bound 0.00100)', or for a server that lists only its most
    likely tokens ', KL from dense >= 0.00100 nats (top-20 bound)'; empty where neither was measured."""
    whole, bound = f.get("kl_dense"), f.get("kl_dense_top")
    if whole is not None:
        return f", KL from dense {whole:.5f} nats" + ("" if bound is None else f" (top-{KL_TOP} bound {bound:.5f})")
    return "" if bound is None else f", KL from dense >= {bound:.5f} nats (top-{KL_TOP} bound)"


def departure_label(d: dict) -> str:
    """' (a tie)', ' (NOT a tie)', or on a batch-invariant kernel (no tie bound) ' (NOT a tie: batch-invariant kernel)'."""
    if d.get("is_tie"):
        return " (a tie)"
    return " (NOT a tie: batch-invariant kernel)" if d.get("kernel") and d.get("bound") is None else " (NOT a tie)"


def lane_label(kernel: str | None, runner: str | None, kernels: bool, runners: bool) -> str:
    """" [int8 static]": what tells a row's lane apart when a bench ran several (empty: one lane)."""
    parts = [p for p, shown in ((kernel, kernels), (runner, runners)) if shown and p]
    return f" [{' '.join(parts)}]" if parts else ""
