"""Entry point (Hugging Face Spaces runs this file): build the demo and launch it.

Gradio reads GRADIO_SERVER_NAME and GRADIO_SERVER_PORT itself; SPECDEC_PAIR picks the default model pair,
SPECDEC_PAIRS the pairs visitors may pick, SPECDEC_DTYPE overrides the automatic precision, and
SPECDEC_GPU_SECONDS bounds one ZeroGPU call.
"""

import os
import sys

try:  # ZeroGPU: `spaces` must be imported before torch looks for CUDA (it stands in for the GPU until a call)
    import spaces  # noqa: F401
except ImportError:
    pass

from specdec.serving.gpu_budget import call_limit  # noqa: E402
from specdec.models.pair import dtype_override  # noqa: E402
from specdec.serving.pairs import shared_store  # noqa: E402

try:  # a mistyped variable stops the app at once, with one line, instead of at the first visitor
    dtype_override()
    call_limit()
    store = shared_store()
except ValueError as err:
    sys.exit(f"error: {err}")
for name, why in store.offer.hidden.items():
    print(f"not offered: {name} ({why})")

from app.ui import build_demo, launch_kwargs  # noqa: E402 (after the checks: gradio is slow to import)

demo = build_demo()
demo.queue(max_size=16)  # bounded: a full queue tells new visitors to come back rather than piling up

if __name__ == "__main__":
    if os.environ.get("SPECDEC_PRELOAD", "1") == "1":
        # Load the default pair before the first visitor arrives (shared by every session afterwards).
        try:
            from specdec.serving import torch_thread
            from specdec.kernels.variants import default_variant, draft_model

            pair = store.get(store.default)
            variant = default_variant(pair.name, pair.device)
            if pair.draft is not None:  # the default draft variant too: from its disk cache, or built once
                torch_thread.call(draft_model, pair, variant)  # where every run will use it (torch_thread says why)
            print(f"loaded {pair.name} on {pair.device} ({pair.dtype_name}) from {pair.source}, draft variant {variant}")
        except ValueError as err:  # the page says the same to each visitor who asks for it; other pairs still serve
            print(f"error: {err}")
    demo.launch(**launch_kwargs())
