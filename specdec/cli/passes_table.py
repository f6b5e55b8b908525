"""What `python -m specdec passes` prints, from the figures it measured (specdec.cli.passes):

- ms per pass, one column per runner, and each runner's time over the first runner's;
- per runner and target kernel: the decode step (the one-token pass), its time over the first
  kernel's, each check of n tokens in decode steps, and c, each draft's pass in decode steps;
- with --without-products: each pass beside the same pass with its matrix products replaced by
  zeros, and what the products took.

Every ratio is of two medians of the same run, as the docs quote them.
"""

from __future__ import annotations


def tables(result: dict) -> str:
    med = {(p["model"], p["name"], p["runner"], p["products"], p["tokens"]): p["median_s"] for p in result["passes"]}
    lines = [heading(result), *capture_lines(result), "", *pass_table(result, med)]
    if 1 in result["sizes"]:
        lines += ["", *ratio_table(result, med)]
    if any(not p["products"] for p in result["passes"]):
        lines += ["", *products_table(result, med)]
    return "\n".join(lines)


def heading(result: dict) -> str:
    m = result["machine"]
    return (f"{result['pair']}, {m['dtype']} on {m['device']}, {result['context']} cached positions, median of "
            f"{result['repeats']} rounds, {m['torch_threads']} torch threads; CPU {m['cpu']} ({' '.join(m['cpu_flags']) or 'no avx2'})")


def capture_lines(result: dict) -> list[str]:
    """One line per compiled model: the seconds each of its shapes took to capture."""
    by_model: dict[str, list[str]] = {}
    for c in result["capture_s"]:
        by_model.setdefault(f"{c['model']} {c['name']} ({c['runner']})", []).append(f"{c['tokens']} tok {c['seconds']:.1f} s")
    return [f"captured {model}: {', '.join(shapes)}" for model, shapes in by_model.items()]


def rows(result: dict) -> list[tuple[str, str, bool, int]]:
    """(model, name, products, tokens) of every pass, targets first, in the order given."""
    found = [(p["model"], p["name"], p["products"], p["tokens"]) for p in result["passes"]]
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=lambda r: (r[0] != "target", unique.index(r)))


def pass_table(result: dict, med: dict) -> list[str]:
    runners = result["runners"]
    first = runners[0]
    out = ["| pass | tokens | resident GB | " + " | ".join(f"{r} ms" for r in runners) + "".join(f" | {r} / {first}" for r in runners[1:]) + " |",
           "|---|---:|---:|" + "---:|" * (2 * len(runners) - 1)]
    shown = set()  # the models whose resident memory is in the table already (on their first row)
    for model, name, products, n in rows(result):
        times = [med[model, name, r, products, n] for r in runners]
        gb = "" if (model, name) in shown else f"{result['resident_gb'][f'{model} {name}']:.3f}"
        shown.add((model, name))
        label = f"{model} {name}" + ("" if products else ", without products")
        out.append(f"| {label} | {n} | {gb} | " + " | ".join(f"{1e3 * t:.1f}" for t in times)
                   + "".join(f" | {t / times[0]:.3f}" for t in times[1:]) + " |")
    return out


def ratio_table(result: dict, med: dict) -> list[str]:
    kernels, checks, variants = result["kernels"], [n for n in result["sizes"] if n > 1], result["variants"]
    out = [f"| runner | target | decode step ms | / {kernels[0]}'s | " + " | ".join(f"{n} tok / decode step" for n in checks)
           + "".join(f" | c of draft {v}" for v in variants) + " |",
           "|---|---|---:|---:|" + "---:|" * (len(checks) + len(variants))]
    for r in result["runners"]:
        for k in kernels:
            step = med["target", k, r, True, 1]
            cells = [f"{1e3 * step:.1f}", f"{step / med['target', kernels[0], r, True, 1]:.3f}"]
            cells += [f"{med['target', k, r, True, n] / step:.2f}" for n in checks]
            cells += [f"{med['draft', v, r, True, 1] / step:.3f}" for v in variants]
            out.append(f"| {r} | {k} | " + " | ".join(cells) + " |")
    return out


def products_table(result: dict, med: dict) -> list[str]:
    out = ["| pass | tokens | runner | whole pass ms | without the products ms | products ms | share not products |",
           "|---|---:|---|---:|---:|---:|---:|"]
    for model, name, products, n in rows(result):
        for r in result["runners"] if products else []:
            whole, rest = med[model, name, r, True, n], med[model, name, r, False, n]
            out.append(f"| {model} {name} | {n} | {r} | {1e3 * whole:.1f} | {1e3 * rest:.1f} | {1e3 * (whole - rest):.1f} | {rest / whole:.0%} |")
    return out
