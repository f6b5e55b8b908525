"""The lanes of a run's stream: every source of a run on the page (this project's engine on the
torch thread or a ZeroGPU worker, a remote engine's server, the rest of a stepped run) yields
(lane, item) pairs, and app.live.receive puts each item where its lane says."""

from __future__ import annotations

from enum import StrEnum


class Lane(StrEnum):
    """Where an item of a run's stream of (lane, item) pairs goes (app.live.receive). The values are
    the strings the stream carries: specdec.serving.torch_thread.Stream ends it with "done" or "error"."""

    SPEC = "spec"  # a StepEvent of the speculative run
    PLAIN = "plain"  # a StepEvent of plain decoding with the same settings
    LOSSY = "lossy"  # a StepEvent of plain decoding on an int4 copy of the target
    SPEC_PENDING = "spec_pending"  # PendingText: a remote engine's text before its steps are known (vLLM)
    PLAIN_PENDING = "plain_pending"
    DECODE_STEP = "decode_step"  # seconds of one plain decode step, timed when no plain run gives it
    CAPTURE = "capture"  # seconds the runner spent capturing passes in this call
    DONE = "done"  # the stream has ended
    ERROR = "error"  # the stream raised: the exception
