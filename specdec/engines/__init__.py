"""Other engines as sources of StepEvents: a server (llama.cpp, vLLM) read over HTTP, its steps
recovered from the counters it reports. What an engine does not report stays None in the events.

base: the error, the protocol and the step assembler every remote engine shares; server: start,
wait for and stop a server process; stream: an OpenAI-style server-sent-events client;
llamacpp: llama.cpp's llama-server (built here from source) as a source of steps."""
