"""The theory tab's two buttons: Sweep K (real runs at K = 1, 2, 3, 4, 6, 8 beside one plain run,
after the request's checks: app/request.py) and Measure pass costs. Handlers take the inputs as a dict and return (or yield) dicts of updates.
Both run in this process (they are off on ZeroGPU, where GPU work runs in a worker per call)."""

from __future__ import annotations

import gradio as gr

from specdec.serving import torch_thread
from specdec.engines.base import EngineError
from specdec.engines.ours import OurSource
from specdec.serving.pairs import shared_store
from specdec.engines.sweep import SWEEP_KS, sweep_k
from specdec.measure.metrics import summarize

from . import engine_choice, theory
from .request import admitted, refusal
from .settings import SWEEP


def _forget_other_pair(session, key) -> None:
    if session.pair_key != key:  # the curves drawn so far belong to another pair
        session.metrics = session.k = session.speedup = None
        session.sweep = []
        session.pair_key = key


def measure_passes(page, values: dict, progress: gr.Progress) -> dict:
    """Measure again the cost table of every target kernel (a target pass over 1..16 tokens after 200
    cached positions, and one pass of the draft variant chosen on the page), and llama.cpp's own
    when the page has started its servers; every session of this process sees the new tables."""
    from specdec.measure import cost_table
    from specdec.kernels import device_offer
    from specdec.kernels.target_kernels import kernel_target

    session, store = values[page.theory_state], shared_store()
    try:
        with store.acquire(store.check_offered(values[page.pair]), progress=lambda f, msg: progress(f, desc=msg)) as pair:
            variant = values[page.draft_variant]
            key = (pair.name, pair.dtype_name)
            tables, KERNELS = {}, device_offer.target_kernels(pair.device).names
            for i, kernel in enumerate(KERNELS):
                progress(i / (len(KERNELS) + 1), desc=f"pass costs: target kernel {kernel} (building it the first time)")
                tables[kernel] = torch_thread.call(cost_table.measure, pair, kernel=kernel, draft_variant=variant, refresh=True,
                                                   target=lambda kernel=kernel: kernel_target(pair, kernel))
            servers = engine_choice.embedded_servers()
            if servers is not None:
                from specdec.engines.llamacpp_costs import embedded_tables

                progress(len(KERNELS) / (len(KERNELS) + 1), desc="pass costs: llama.cpp (a server of the draft alone)")
                tables.update(embedded_tables(servers.plain_url, pair.vocab_size))
            theory.KERNEL_COSTS[key] = tables
            theory.PASS_COSTS[key] = tables["dense"]
    except (ValueError, EngineError) as err:
        return {page.theory_status: f"Not measured: {err}"}
    _forget_other_pair(session, key)
    out = theory.updates(page, session)
    out[page.theory_status] = (f"Pass costs measured for {pair.name} on {pair.device} ({pair.dtype_name}), draft {variant}: "
                               + ", ".join(tables) + " (cached on disk per machine; this button measures again).")
    return out


def sweep(page, values: dict, progress: gr.Progress):
    """Run the prompt with the current settings at each K of SWEEP_KS (fixed K), after one plain
    run; the measured points join the speedup-vs-K chart as they come."""
    stop, session = values[page.stop], values[page.theory_state]
    stop.clear()
    try:
        with admitted(page, values, progress, SWEEP) as request:
            pair, config, ids = request.pair, request.config, request.prompt_ids
            _forget_other_pair(session, (pair.name, pair.dtype_name))
            session.sweep = []
            yield {page.theory_status: f"Sweep K on {pair.name}: plain decoding first (the reference for every point)\u2026"}
            plain = OurSource(pair, config, stop=stop).plain()
            plain_events = torch_thread.call(lambda: list(plain.decode(ids)))
            plain_tok_s = summarize(plain_events).tokens_per_s
            for point in torch_thread.iterate(sweep_k(pair, ids, config, SWEEP_KS, plain_events=plain_events, stop=stop)):
                session.sweep.append(point)
                if session.metrics is None and point.k >= min(config.k, SWEEP_KS[-1]):  # no run yet: the curves need one
                    session.metrics, session.k, session.speedup = point.metrics, point.k, point.speedup
                out = theory.updates(page, session)
                done = ", ".join(f"K={p.k} {p.speedup:.2f}\u00d7" for p in session.sweep if p.speedup)
                out[page.theory_status] = f"Sweep K ({config.max_new_tokens} tokens, plain {plain_tok_s:.1f} tok/s): {done}"
                yield out
    except ValueError as err:
        yield {page.theory_status: refusal(err)}
        return
    if stop.is_set():
        yield {page.theory_status: "Sweep K stopped."}
