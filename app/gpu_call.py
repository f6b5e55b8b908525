"""The GPU part of a live run: `stream_events`, a generator with plain arguments and results. On a
ZeroGPU Space `spaces.GPU` runs it in a worker process forked from the app's (arguments and events
are pickled across), asking for a duration computed from the request; elsewhere it is a plain
generator. Its lanes are this project's engine's (specdec.engines.ours.OurSource: the run, plain()
and lossy()), each a run of the prompt ids the request encoded once (app/request.py)."""

from __future__ import annotations

import math

from specdec.core.config import GenerationConfig
from specdec.engines.ours import OurSource
from specdec.measure.passcost import time_decode_step
from specdec.serving import gpu_budget
from specdec.serving.pairs import shared_store

from .lanes import Lane

try:  # on a ZeroGPU Space, GPU work must run inside spaces.GPU (a no-op elsewhere)
    import spaces
except ImportError:
    spaces = None


def gpu_seconds(pair_name: str, prompt_ids: list[int], config: GenerationConfig, compare: bool, plain_int4: bool = False) -> int:
    """The duration ZeroGPU is asked for: the longest this run can take (same arguments as stream_events;
    the lossy lane counted as one more plain run, which it is faster than)."""
    costs = gpu_budget.costs_for(gpu_budget.cost_key(pair_name, config))
    seconds = gpu_budget.call_seconds(config, compare, costs)
    if plain_int4:
        seconds += gpu_budget.call_seconds(config, True, costs) - gpu_budget.call_seconds(config, False, costs)
    return math.ceil(seconds)


_calls_here = 0  # GPU calls this process has run (a ZeroGPU worker, forked from the app's process, starts at 0)


def _on_gpu(fn):
    return spaces.GPU(duration=gpu_seconds, size=gpu_budget.gpu_size())(fn) if spaces is not None else fn


@_on_gpu
def stream_events(pair_name: str, prompt_ids: list[int], config: GenerationConfig, compare: bool, plain_int4: bool = False):
    """(Lane.SPEC, StepEvent) for each step of the speculative run, then (Lane.PLAIN, StepEvent) for
    the plain run with the same settings (without it, (Lane.DECODE_STEP, seconds): one plain decode
    step timed on the finished run's cache, the unit of c and the verify cost), then (Lane.LOSSY,
    StepEvent) for plain decoding with an int4 copy of the target (built once per pair, cached on
    disk), and last (Lane.CAPTURE, gpu_budget.CaptureReport): what the runner spent capturing passes
    in this call, and whether the call was its process's first (0 s but for the compiled runner's
    first runs in a process; a ZeroGPU worker may be fresh or kept from an earlier call:
    docs/deploy.md). The pair is already loaded (in this process, or in the one a ZeroGPU worker was
    forked from), and the body needs no other thread: a worker forked from this process has only
    the thread that runs it."""
    global _calls_here
    fresh, _calls_here = _calls_here == 0, _calls_here + 1
    ours = OurSource(shared_store().loaded_pair(pair_name), config)
    decoding = ours.decode(prompt_ids)
    for event in decoding:
        yield Lane.SPEC, event
    capture_s = decoding.runner.capture_s
    if compare:
        plain = ours.plain().decode(prompt_ids)  # the baseline: nothing drafted
        for event in plain:
            yield Lane.PLAIN, event
        capture_s += plain.runner.capture_s
    else:
        yield Lane.DECODE_STEP, time_decode_step(decoding)
    if plain_int4:
        for event in ours.lossy().decode(prompt_ids):
            yield Lane.LOSSY, event
    yield Lane.CAPTURE, gpu_budget.CaptureReport(capture_s, fresh)
