"""Entry point (Hugging Face Spaces runs this file): build the demo and launch it.

Gradio reads GRADIO_SERVER_NAME and GRADIO_SERVER_PORT itself; SPECDEC_PAIR picks the default model pair.
"""

import os

from app.ui import build_demo, default_pair_name, launch_kwargs

demo = build_demo()
demo.queue(max_size=16)  # bounded: a full queue tells new visitors to come back rather than piling up

if __name__ == "__main__":
    if os.environ.get("SPECDEC_PRELOAD", "1") == "1":
        # Load the default pair before the first visitor arrives (shared by every session afterwards).
        from specdec.models import load_pair

        pair = load_pair(default_pair_name())
        print(f"loaded {pair.name} on {pair.device} ({pair.dtype_name}) from {pair.source}")
    demo.launch(**launch_kwargs())
