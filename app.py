"""Entry point (Hugging Face Spaces runs this file): build the demo and launch it.

Gradio reads GRADIO_SERVER_NAME and GRADIO_SERVER_PORT itself; SPECDEC_PAIR picks the default model pair,
SPECDEC_PAIRS the pairs visitors may pick, SPECDEC_DTYPE overrides the automatic precision, and
SPECDEC_GPU_SECONDS and SPECDEC_GPU_SIZE bound one ZeroGPU call (docs/deploy.md).
"""

import os
import sys

try:  # ZeroGPU: `spaces` must be imported before torch looks for CUDA (it stands in for the GPU until a call)
    import spaces  # noqa: F401
except ImportError:
    pass

from specdec.models.machine import zero_gpu  # noqa: E402
from specdec.models.pair import dtype_override  # noqa: E402
from specdec.serving.gpu_budget import call_limit, gpu_size  # noqa: E402
from specdec.serving.pairs import shared_store  # noqa: E402
from specdec.serving.startup import preload  # noqa: E402

try:  # a mistyped variable stops the app at once, with one line, instead of at the first visitor
    dtype_override()
    call_limit()
    gpu_size()
    store = shared_store()
except ValueError as err:
    sys.exit(f"error: {err}")
print(store.offer.explain())


def load_before_visitors() -> None:
    """The pairs served first, loaded now (shared by every session afterwards); a pair that fails
    is reported, and the page says the same to each visitor who asks for it."""
    try:
        for line in preload(store):
            print(line)
    except ValueError as err:
        print(f"error: {err}")


if zero_gpu():  # at module level, in the main thread: ZeroGPU takes the pairs placed on "cuda" here (specdec/serving/startup.py)
    load_before_visitors()
elif __name__ == "__main__" and os.environ.get("SPECDEC_PRELOAD", "1") == "1":
    load_before_visitors()  # before the page is built: the page starts on what was measured here (specdec/serving/defaults_here.py)

from app.ui import build_demo, launch_kwargs  # noqa: E402 (after the checks: gradio is slow to import)

demo = build_demo()
demo.queue(max_size=16)  # bounded: a full queue tells new visitors to come back rather than piling up

if __name__ == "__main__":
    demo.launch(**launch_kwargs())
