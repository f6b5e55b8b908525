"""The record as a printed table; a section that failed or was skipped prints its one line."""

from __future__ import annotations

from .passes import ALPHA_CPU, CHECK_K


def print_table(data: dict, args) -> None:
    errors = data["errors"]
    for name, printer in PRINTERS.items():
        if name in errors:
            print(f"\n{name}: {errors[name]}")
        elif data.get(name) is not None:
            printer(data[name], args)
    print(f"\npeak GPU memory: {data.get('peak_gb')} GB, whole check {data['seconds']:.0f} s"
          + (f", failed: {', '.join(errors)}" if errors else ", every section finished"))


def _passes(passes: dict, args) -> None:
    print("\nper pass (ms): one token, then the check of K+1 for K =", ", ".join(map(str, CHECK_K)))
    for key, row in passes.items():
        if "error" in row:
            print(f"  {key:<16} {row['error']}")
            continue
        cap = row["capture_s"]
        captured = f"  captured in {sum(cap.values()):.1f} s" if cap else ""
        failed = f"  NOT CAPTURED: {row['capture_failed']}" if row["capture_failed"] and key.endswith("compiled") else ""
        print(f"  {key:<16} " + "  ".join(f"{n}:{ms:7.2f}" for n, ms in row["pass_ms"].items()) + captured + failed)


def _costs(costs: dict, args) -> None:
    print(f"\nc, verify cost and predicted speedup at alpha {ALPHA_CPU} (K = {', '.join(map(str, CHECK_K))})")
    for key, row in costs.items():
        if "error" in row:
            print(f"  {key:<20} {row['error']}")
            continue
        verify = " ".join(f"{v:.2f}" for v in row["verify_cost"].values())
        speed = " ".join(f"{v:.2f}x" for v in row["predicted_speedup"].values())
        print(f"  {key:<20} c {row['c']:.3f}   verify {verify}   predicted {speed}")


def _capture(estimate: dict, args) -> None:
    shown = [f"{pair} {row['first_call_capture_s']} s" if row else f"{pair} not captured" for pair, row in estimate.items()]
    print("\nfirst-call capture (gpu_budget.CAPTURE_ESTIMATES['compiled']):", ", ".join(shown))


def _runs(label):
    def show(rows: dict, args) -> None:
        print(f"\n{label} ({args.loop_runner} runner, K = {args.k}, {args.tokens} tokens):")
        for name, row in rows.items():
            differ = row["first_difference"]
            same = "same tokens" if differ is None else (
                f"differ at {differ['index']} (margin {differ['margin']}, {'a tie' if differ['is_tie'] else 'NOT a tie'})")
            print(f"  {name:<10} spec/plain {row['speedup']:.2f}x, acceptance {row['spec']['acceptance']:.2f}, spec "
                  f"{row['spec']['ms_per_step']:.2f} ms/step against {row['spec_step_accounted_ms']:.2f} accounted, plain "
                  f"{row['plain']['ms_per_step']:.2f} against {row['plain_step_accounted_ms']:.2f}; {same}")
    return show


def _syncs(syncs: dict, args) -> None:
    print("\nhost syncs in each of four steady-state steps:", syncs)


def _graph(graph: dict, args) -> None:
    print("\ndraft of K as one graph:", graph)


def _parity(parity: dict, args) -> None:
    def verdict(v):
        if v["same_events"]:
            return "same"
        d = v["first_difference"]
        return "DIFFERENT" + (f" at {d['index']} (margin {d['margin']}, {'a tie' if d['is_tie'] else 'NOT a tie'})" if d else "")
    print("\nparity with eager (tiny-random, fp32):", ", ".join(
        f"{k}: {verdict(v)} ({v['max_float_difference']:.1e})" for k, v in parity.items()))


PRINTERS = {"passes": _passes, "costs": _costs, "first_call_capture": _capture, "syncs": _syncs,
            "loop_cost": _runs("loop cost, random weights"), "draft_graph_of_k": _graph,
            "forced_acceptance": _runs("forced acceptance"), "parity": _parity}
