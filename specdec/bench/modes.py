"""The benchmark's mode names: what `bench` runs and what its `--modes` option offers.

Apart from specdec/bench/runner.py so that the command-line options (specdec/cli/args.py) can name the
modes without importing the benchmark, which imports them: the dependency runs one way.
"""

from specdec.engines.bench_servers import SERVED_MODES

OUR_MODES = ("plain", "spec", "lookup", "best", "head", "best_head", "best_both", "page", "plain_int4")  # our engine; plain_int4: plain decoding, int4 target (lossy)
# page: what the page and generate start on here when nothing is named (its drafter, draft variant and K
# policy: specdec.serving.defaults_here.start_defaults), on each target kernel the bench runs
HEAD_MODES = ("head", "best_head", "best_both")  # our modes where the trained head drafts (docs/head.md)
DRAFT_MODES = ("spec", "best", "best_both")  # our modes that run the draft model: --draft-variant applies to them
HF = ("hf_assisted", "hf_lookup", "hf_assisted_cpulinear", "hf_lookup_cpulinear")  # transformers' generate, same models
# *_cpulinear: transformers' loop with our CPU matmul choices (kernels.cpu_linear.CpuLinear), which
# separates what the loop costs from what the kernels cost.
# SERVED_MODES: a real engine's server on the bundle's files, plain (no draft) and speculative (its
# own draft loop), each speculative one checked against its own plain (specdec/engines/bench_servers.py).
MODES = OUR_MODES + HF + SERVED_MODES
DEFAULT_MODES = ("plain", "spec", "best", "hf_assisted", "hf_lookup")
HEAD_DEFAULT_MODES = ("plain", "best", "head", "best_head")  # bench --drafter head: the head beside plain and the draft model's best
