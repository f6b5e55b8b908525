"""The UI: renders StepEvents as HTML and charts, and wires them into a Gradio page. Computes nothing the engine owns."""
