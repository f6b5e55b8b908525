"""The GPU check: the runners (eager, static, compiled) on the real shapes of two pairs, with random
weights and no download, in one call: `scripts/gpu_check.sh` (the CUDA tests, then
`python -m scripts.gpu_check`). NOT RUN ON A GPU YET: written and dry-run on a CPU, where the
compiled runner is torch.compile instead of CUDA graphs and the CUDA-only calls are stand-ins
(cuda.py), so every section's own code runs there too.

Every model runs the attention of its device (`attention_path` in the record; specdec/kernels/attention.py).
What it measures, one section after another (main.py), each under its own guard, the JSON record
(--out, else $OUT/gpu_check.json when $OUT is set) written after each (record.py), then a table:
- models: the 0.5B draft and the 1.5B and 7B targets, made on the device in the dtype;
- passes: per model and runner, the one-token pass, the target's check of K + 1 tokens for
  K = 1, 3, 5, 7, the capture time of each shape (compiled runner), and why a shape did not
  capture, if one did not;
- costs: per pair and runner, c (a draft pass over a decode step), the verify cost of each K, and
  the speedup Leviathan et al.'s formula predicts with them at the per-token acceptance the
  1.5B/0.5B pair measured on a CPU (ALPHA_CPU; the 7B pair was never measured, the same figure
  stands in for it);
- first_call_capture: what a fresh ZeroGPU worker's first default run would spend capturing
  (specdec.serving.gpu_budget.CAPTURE_ESTIMATES["compiled"] is to be set from it);
- syncs: synchronizing CUDA calls per steady-state step of each runner (torch.cuda.set_sync_debug_mode);
- loop_cost: per pair, a whole greedy run on the loop runner against plain decoding on it. Random
  weights accept almost nothing, so this measures the loop's own cost: the measured seconds per
  step against the K draft passes and one check the pass timings account for; and where the two
  texts first part, with the target's top-2 margin there (bf16 near-ties part them);
- draft_graph_of_k: the draft's K one-token passes as one CUDA graph against K replays of the
  one-pass graph;
- forced_acceptance: the whole runs with acceptance forced to 1 (every attention and MLP output
  projection zeroed: each layer adds nothing, both models predict "repeat the last token"; dense
  kernels cost the same with zeros): an upper bound for a real pair;
- attention: the device's attention path alone against transformers' sdpa, on each model's heads,
  a mask over caches of 512 to 8192 positions, one token and checks of K + 1 rows (attention.py);
- parity: greedy parity of the static and compiled runners with eager decoding, fp32, on tiny-random;
  then every runner on the same pair built on the CPU and moved to the device, as ZeroGPU runs it;
- peak GPU memory.

Before any of it, scripts/gpu_check.sh makes the device's Python right (preflight.py).
"""
