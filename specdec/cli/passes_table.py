"""What `python -m specdec passes` prints, from the figures it measured (specdec.cli.passes):

- ms per pass, one column per runner, and each runner's time over the first runner's;
- per runner and target kernel: the decode step (the one-token pass), its time over the first
  kernel's, each check of n tokens in decode steps, and c, each draft's pass in decode steps;
- with --without-products: each pass beside the same pass with its matrix products replaced by
  zeros, and what the products took;
- with --invariance-cost: each batch-invariant target pass beside the same pass with batch
  invariance undone;
- with --drafter head: the head's draft step beside each target kernel, and its c;
- each target kernel's physical limit: the bytes a decode step reads over the rate this machine
  reads memory at (specdec.measure.stream_rate), beside its measured step.

Every ratio is of two medians of the same run, as the docs quote them.
"""

from __future__ import annotations

from specdec.measure.stream_rate import READ_MIB, READ_REPEATS


def tables(result: dict) -> str:
    med = {(p["model"], p["name"], p["runner"], p["products"], p.get("invariance_undone", False), p["tokens"]): p["median_s"]
           for p in result["passes"]}
    lines = [heading(result), *capture_lines(result), *head_lines(result), "", *pass_table(result, med)]
    if 1 in result["sizes"]:
        lines += ["", *ratio_table(result, med)]
        if "read_gbs" in result:
            lines += ["", *limit_table(result, med)]
    if any(not p["products"] for p in result["passes"]):
        lines += ["", *products_table(result, med)]
    if any(p.get("invariance_undone") for p in result["passes"]):
        lines += ["", *invariance_table(result, med)]
    return "\n".join(lines)


def heading(result: dict) -> str:
    m = result["machine"]
    forced = "".join(f"; {name}={value}" for name, value in result.get("forced_paths", {}).items())
    return (f"{result['pair']}, {m['dtype']} on {m['device']}, {result['context']} cached positions, median of "
            f"{result['repeats']} rounds, {m['torch_threads']} torch threads; CPU {m['cpu']} ({' '.join(m['cpu_flags']) or 'no avx2'}){forced}")


def capture_lines(result: dict) -> list[str]:
    """One line per compiled model: the seconds each of its shapes took to capture."""
    by_model: dict[str, list[str]] = {}
    for c in result["capture_s"]:
        by_model.setdefault(f"{c['model']} {c['name']} ({c['runner']})", []).append(f"{c['tokens']} tok {c['seconds']:.1f} s")
    return [f"captured {model}: {', '.join(shapes)}" for model, shapes in by_model.items()]


def head_lines(result: dict) -> list[str]:
    """One line per head kernel: its drafts (the first of a step, then each further one), and the
    target kernels it runs beside."""
    beside: dict[str, list[dict]] = {}
    for h in result.get("heads", []):
        beside.setdefault(h["head_kernel"], []).append(h)
    return [f"head drafts, {kernel} head (beside target {', '.join(h['target_kernel'] for h in heads)}): "
            f"the first of a step {1e3 * heads[0]['first_s']:.2f} ms (after a target pass has emptied the caches), "
            f"each further one {1e3 * heads[0]['median_s']:.2f} ms" for kernel, heads in beside.items()]


def rows(result: dict) -> list[tuple[str, str, bool, bool, int]]:
    """(model, name, products, invariance undone, tokens) of every pass, targets first, in the order given."""
    found = [(p["model"], p["name"], p["products"], p.get("invariance_undone", False), p["tokens"]) for p in result["passes"]]
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=lambda r: (r[0] != "target", unique.index(r)))


def pass_table(result: dict, med: dict) -> list[str]:
    runners = result["runners"]
    first = runners[0]
    out = ["| pass | tokens | resident GB | " + " | ".join(f"{r} ms" for r in runners) + "".join(f" | {r} / {first}" for r in runners[1:]) + " |",
           "|---|---:|---:|" + "---:|" * (2 * len(runners) - 1)]
    shown = set()  # the models whose resident memory is in the table already (on their first row)
    for model, name, products, undone, n in rows(result):
        times = [med[model, name, r, products, undone, n] for r in runners]
        gb = "" if (model, name) in shown else f"{result['resident_gb'][f'{model} {name}']:.3f}"
        shown.add((model, name))
        label = f"{model} {name}" + ("" if products else ", without products") + (", batch invariance undone" if undone else "")
        out.append(f"| {label} | {n} | {gb} | " + " | ".join(f"{1e3 * t:.1f}" for t in times)
                   + "".join(f" | {t / times[0]:.3f}" for t in times[1:]) + " |")
    return out


def ratio_table(result: dict, med: dict) -> list[str]:
    kernels, checks, variants = result["kernels"], [n for n in result["sizes"] if n > 1], result["variants"]
    heads = {h["target_kernel"]: h["first_s"] for h in result.get("heads", [])}  # what a step of K = 1 pays
    out = [f"| runner | target | decode step ms | / {kernels[0]}'s | " + " | ".join(f"{n} tok / decode step" for n in checks)
           + "".join(f" | c of draft {v}" for v in variants) + (" | c of the head's first draft" if heads else "") + " |",
           "|---|---|---:|---:|" + "---:|" * (len(checks) + len(variants) + bool(heads))]
    for r in result["runners"]:
        for k in kernels:
            step = med["target", k, r, True, False, 1]
            cells = [f"{1e3 * step:.1f}", f"{step / med['target', kernels[0], r, True, False, 1]:.3f}"]
            cells += [f"{med['target', k, r, True, False, n] / step:.2f}" for n in checks]
            cells += [f"{med['draft', v, r, True, False, 1] / step:.3f}" for v in variants]
            cells += [f"{heads[k] / step:.3f}"] if heads else []
            out.append(f"| {r} | {k} | " + " | ".join(cells) + " |")
    return out


def limit_table(result: dict, med: dict) -> list[str]:
    """Per runner and target kernel: the bytes a decode step reads, the time reading them takes at
    this machine's measured rate (the step's physical limit), the measured step, and their ratio."""
    rate = result["read_gbs"]
    out = [f"memory read at {rate:.1f} GB/s here (a sum over {READ_MIB} MiB, median of {READ_REPEATS}); "
           "no decode step can be faster than its bytes at that rate",
           "| runner | target | GB read a step | limit ms | decode step ms | step / limit |", "|---|---|---:|---:|---:|---:|"]
    for r in result["runners"]:
        for k in result["kernels"]:
            gb, step = result["streamed_gb"][k], med["target", k, r, True, False, 1]
            limit = gb / rate
            out.append(f"| {r} | {k} | {gb:.3f} | {1e3 * limit:.1f} | {1e3 * step:.1f} | {step / limit:.2f} |")
    return out


def products_table(result: dict, med: dict) -> list[str]:
    out = ["| pass | tokens | runner | whole pass ms | without the products ms | products ms | share not products |",
           "|---|---:|---|---:|---:|---:|---:|"]
    for model, name, products, undone, n in rows(result):
        for r in result["runners"] if products and not undone else []:
            whole, rest = med[model, name, r, True, False, n], med[model, name, r, False, False, n]
            out.append(f"| {model} {name} | {n} | {r} | {1e3 * whole:.1f} | {1e3 * rest:.1f} | {1e3 * (whole - rest):.1f} | {rest / whole:.0%} |")
    return out


def invariance_table(result: dict, med: dict) -> list[str]:
    out = ["| pass | tokens | runner | batch-invariant ms | invariance undone ms | invariant / undone |", "|---|---:|---|---:|---:|---:|"]
    for model, name, products, undone, n in rows(result):
        for r in result["runners"] if undone else []:
            kept, plain = med[model, name, r, True, False, n], med[model, name, r, True, True, n]
            out.append(f"| {model} {name} | {n} | {r} | {1e3 * kept:.1f} | {1e3 * plain:.1f} | {kept / plain:.3f} |")
    return out
