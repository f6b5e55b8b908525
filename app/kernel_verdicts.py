"""The theory tab's sentence on every measured target kernel (and llama.cpp): how far its decode step is
from its physical limit (its bytes over the memory's read rate), what its check of K+1 tokens costs in
its own decode steps, and whether drafting pays there."""

from __future__ import annotations


def kernels_sentence(tables: dict, k: int, alpha: float | None) -> str:
    """Per kernel: its decode step, what checking K+1 tokens costs in its own decode steps, and (with
    an acceptance from a run) the K the cost policy would choose there and the speedup it predicts."""
    from specdec.core.k_policy import best_choice

    parts = []
    for name, costs in tables.items():
        part = (f"**{name}**: decode step {1000 * costs.decode_step_s:.0f} ms{limit_clause(costs)}, checking {k + 1} "
                f"tokens costs {costs.verify_cost(k):.2f} of them")
        if alpha is not None and costs.draft_s is not None:
            choice = best_choice(alpha, costs.draft_s, costs, 15)
            gain = choice.predicted_tok_s * costs.decode_step_s if choice.predicted_tok_s else 1.0
            part += (f"; at \u03b1 = {alpha:.2f} drafting does not pay (K = 0)" if choice.k == 0 else
                     f"; at \u03b1 = {alpha:.2f} the best K is {choice.k}, {gain:.2f}\u00d7 plain on this kernel")
        parts.append(part)
    limits = (" A kernel's limit is the bytes its decode step must read over the rate this machine reads memory at: no step "
              "can be faster, and what a step takes beyond it is spent on anything but reading weights."
              if any(costs.limit_s for costs in tables.values()) else "")
    return ("Per kernel: " + "; ".join(parts) + "." + limits + " A kernel that makes the one-token pass cheap (fewer bytes per weight) "
            "but whose time grows with the tokens in a pass (its arithmetic, not its memory, is the limit) makes the check "
            "dear: there speculation pays less, or not at all, though plain decoding is faster.")


def limit_clause(costs) -> str:
    """" (N.N\u00d7 its limit of M ms: G GB at R GB/s)" where the table carries its bytes and read rate, else ""."""
    limit = costs.limit_s
    if not limit:
        return ""
    return (f" ({costs.decode_step_s / limit:.1f}\u00d7 its limit of {1000 * limit:.0f} ms: {costs.streamed_bytes / 1e9:.2f} GB "
            f"at {costs.read_rate / 1e9:.0f} GB/s)")
