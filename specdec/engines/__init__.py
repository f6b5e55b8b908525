"""Sources of StepEvents: this project's engine, and a server (llama.cpp, vLLM) read over HTTP, its
steps recovered from the counters it reports. What an engine does not report stays None in the
events; what a source can do is in the Capabilities it declares, so callers never test its name.

base: the engines' names, Capabilities, the StepSource protocol, the one-line error and the step
assembler every remote engine shares; ours: this project's engine as a StepSource (the one place a
run is built); choice: the one chooser by name (labels, capabilities, a remote engine's source and
server module); server: start, wait for and stop a server process; stream: a server-sent-events
client; remote: the page's entry points (remote_events, remote_updates, start_embedded_llamacpp);
llamacpp: llama-server as a source of steps, and the embedded pair's servers; llamacpp_build: build
llama-server once; llamacpp_costs: its pass costs; vllm: vLLM's server as a source of steps
(assigned when its stream ends), and the embedded pair's servers; vllm_env: vLLM's CPU build in its
own environment (make vllm); bench_servers: the bench's modes that read a real engine's server."""
