"""Entry point (Hugging Face Spaces runs this file): build the demo and launch it.

Gradio reads GRADIO_SERVER_NAME and GRADIO_SERVER_PORT itself; SPECDEC_PAIR picks the default model pair
and SPECDEC_DTYPE overrides the automatic precision.
"""

import os
import sys

from specdec.models import dtype_override

try:  # a mistyped SPECDEC_DTYPE stops the app at once, with one line, instead of at the first visitor
    dtype_override()
except ValueError as err:
    sys.exit(f"error: {err}")

from app.ui import build_demo, default_pair_name, launch_kwargs  # noqa: E402 (after the check: gradio is slow to import)

demo = build_demo()
demo.queue(max_size=16)  # bounded: a full queue tells new visitors to come back rather than piling up

if __name__ == "__main__":
    if os.environ.get("SPECDEC_PRELOAD", "1") == "1":
        # Load the default pair before the first visitor arrives (shared by every session afterwards).
        from specdec.models import load_pair

        pair = load_pair(default_pair_name())
        print(f"loaded {pair.name} on {pair.device} ({pair.dtype_name}) from {pair.source}")
    demo.launch(**launch_kwargs())
