"""Other engines as sources of StepEvents: a server (llama.cpp, vLLM) read over HTTP, its steps
recovered from the counters it reports. What an engine does not report stays None in the events.

base: the one-line error, the StepSource protocol and the step assembler every remote engine
shares; server: start, wait for and stop a server process; stream: a server-sent-events client;
remote: the page's entry points (remote_events, remote_updates, start_embedded_llamacpp); llamacpp:
llama-server as a source of steps, and the embedded pair's servers; llamacpp_build: build
llama-server once; vllm: vLLM's server as a source of steps (assigned when its stream ends), and
the embedded pair's servers; vllm_env: vLLM's CPU build in its own environment (make vllm);
cli: `python -m specdec engines ...`."""
