"""The benchmark's mode names: what `bench` runs and what its `--modes` option offers.

Apart from specdec/bench/runner.py so that the command-line options (specdec/cli/args.py) can name the
modes without importing the benchmark, which imports them: the dependency runs one way.
"""

OURS = ("plain", "spec", "lookup", "best", "plain_int4")  # our engine; plain_int4: plain decoding, int4 target (lossy)
DRAFT_MODES = ("spec", "best")  # our modes that run the draft model: --draft-variant applies to them
HF = ("hf_assisted", "hf_lookup", "hf_assisted_cpulinear", "hf_lookup_cpulinear")  # transformers' generate, same models
# *_cpulinear: transformers' loop with our CPU matmul choices (kernels.cpu_linear.CpuLinear), which
# separates what the loop costs from what the kernels cost.
# llama.cpp's llama-server on the bundle's GGUF files: plain (no draft) and speculative (its own
# draft loop); each server is started once for the bench. llamacpp_spec is checked against llamacpp_plain.
LLAMACPP = ("llamacpp_plain", "llamacpp_spec")
# vLLM's CPU server on the bundle's converted folders (`make vllm`): plain (the target alone) and
# speculative (the draft model, 5 tokens a step). Over 12 GB resident with the draft, so one server
# at a time: each vLLM mode runs all its prompts and rounds as one block with its own server.
VLLM = ("vllm_plain", "vllm_spec")
OWN_PLAIN = {"llamacpp_spec": "llamacpp_plain", "vllm_spec": "vllm_plain"}  # a real engine's exactness is judged against its own plain decoding
MODES = OURS + HF + LLAMACPP + VLLM
DEFAULT_MODES = ("plain", "spec", "best", "hf_assisted", "hf_lookup")
