"""Entry point (Hugging Face Spaces runs this file): build the demo and launch it.

Gradio reads GRADIO_SERVER_NAME and GRADIO_SERVER_PORT itself; SPECDEC_PAIR picks the default model pair.
"""

from app.ui import build_demo, launch_kwargs

demo = build_demo()
demo.queue(max_size=16)  # bounded: a full queue tells new visitors to come back rather than piling up

if __name__ == "__main__":
    demo.launch(**launch_kwargs())
