#!/usr/bin/env bash
# Checks for a machine with an NVIDIA GPU and no network:
#   1. the parity, cache-rollback and distribution tests on CUDA (tiny-random pair, built in code);
#   2. a speed check on models built from the real Qwen2.5-Coder 1.5B / 0.5B configs with random
#      weights (timing does not depend on the values): ms per pass, the cost ratio c, and tokens/s
#      of plain decoding, our speculative decoding and transformers' assisted generation.
#
# Usage:  scripts/gpu_check.sh [--skip-tests] [bench options]
#   bench options: --device cuda|cpu  --dtype bf16|fp16|fp32  --layers N (override both models'
#   depth, e.g. 2 for a quick CPU try)  --k 5  --tokens 128  --prompt-len 128
# A quick run of the Python part without a GPU:  scripts/gpu_check.sh --skip-tests --device cpu --layers 2 --tokens 8
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export HF_HUB_OFFLINE=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}

RUN_TESTS=1
if [ "${1:-}" = "--skip-tests" ]; then RUN_TESTS=0; shift; fi

if [ "$RUN_TESTS" = 1 ]; then
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  # tests/conftest.py builds the tiny pair on $SPECDEC_TEST_DEVICE (default cpu).
  SPECDEC_TEST_DEVICE=cuda "$PY" -m pytest -q tests/test_parity.py tests/test_cache.py tests/test_distribution.py
fi

exec "$PY" - "$@" <<'PY'
"""Speed on the real model shapes, random weights, acceptance forced to 1 (see below)."""
import argparse, statistics, time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from specdec.bench.hf import run_hf
from specdec.bench.policies import mode_config
from specdec.bench.runner import run_ours
from specdec.core.cached_model import CachedModel
from specdec.measure.metrics import predicted_speedup
from specdec.models.pair import DTYPES, ModelPair

# From the public config.json of Qwen/Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct.
COMMON = dict(vocab_size=151936, rope_theta=1_000_000.0, max_position_embeddings=32768, tie_word_embeddings=True,
              hidden_act="silu", rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=None, pad_token_id=None)
TARGET = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2)
DRAFT = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2)

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--dtype", choices=list(DTYPES), default=None, help="default: bf16 on cuda, fp32 on cpu")
p.add_argument("--layers", type=int, default=None, help="override num_hidden_layers of both models")
p.add_argument("--k", type=int, default=5)
p.add_argument("--tokens", type=int, default=128)
p.add_argument("--prompt-len", type=int, default=128)
args = p.parse_args()
device = torch.device(args.device)
dtype = DTYPES[args.dtype or ("bf16" if device.type == "cuda" else "fp32")]


def build(shape: dict) -> torch.nn.Module:
    cfg = dict(COMMON, **shape)
    if args.layers:
        cfg["num_hidden_layers"] = args.layers
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(Qwen2Config(**cfg)).to(dtype).eval()
    # Forced acceptance: with every attention and MLP output projection zeroed, each layer adds
    # nothing to the residual stream, so the logits are norm(embedding(t)) @ embeddings.T, whose
    # argmax is t itself (random embeddings are near-orthogonal). Both models then predict "repeat
    # the last token", so every draft is accepted; dense kernels cost the same with zero weights.
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


class Chars:
    """Stands in for a tokenizer: one character per id, so the engine's text tracking works."""
    eos_token_id = None
    chat_template = None

    def decode(self, ids, **_):
        return "".join(chr(0x4E00 + i % 20000) for i in ids)


def sync():
    if device.type == "cuda":
        torch.cuda.synchronize()


def pass_ms(model, n: int, cache_len: int, reps: int = 10) -> float:
    lm = CachedModel(model, COMMON["vocab_size"])
    lm.prefill(torch.randint(0, 1000, (cache_len,), device=device))
    times = []
    for _ in range(reps + 2):
        ids = torch.randint(0, 1000, (n,), device=device)
        sync(); t = time.perf_counter()
        lm.forward(ids, last_only=n == 1)
        sync(); times.append(time.perf_counter() - t)
        lm.crop(cache_len)
    return 1000 * statistics.median(times[2:])


target, draft = build(TARGET), build(DRAFT)
pair = ModelPair("qwen2.5-coder shapes, random weights", target, draft, Chars(), device, dtype, chat=False)
name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
print(f"device {name}, dtype {str(dtype).removeprefix('torch.')}, torch {torch.__version__}, layers "
      f"{target.config.num_hidden_layers}/{draft.config.num_hidden_layers}, K={args.k}, {args.tokens} new tokens, prompt {args.prompt_len}")
print("weights are random; output projections are zeroed so the draft agrees with the target on every "
      "token (acceptance forced to 1): tokens/s here is an upper bound for the real pair")

t1 = pass_ms(target, 1, args.prompt_len)
tk = pass_ms(target, args.k + 1, args.prompt_len)
d1 = pass_ms(draft, 1, args.prompt_len)
c = d1 / t1
print(f"target pass: 1 token {t1:.1f} ms, {args.k + 1} tokens {tk:.1f} ms ({tk / t1:.2f}x); draft pass {d1:.1f} ms; c = {c:.3f}")
print(f"Leviathan prediction at a=1: {predicted_speedup(1.0, args.k, c):.2f}x; at a=0.8: {predicted_speedup(0.8, args.k, c):.2f}x")

prompt = torch.randint(0, 1000, (args.prompt_len,)).tolist()
rows = {}
for mode in ("plain", "spec", "hf_assisted", "plain", "spec", "hf_assisted"):  # second round is the measured one
    if mode == "hf_assisted":
        run = run_hf(pair, prompt, mode, args.k, args.tokens, "constant")
    else:
        run = run_ours(pair, prompt, mode_config(mode, args.k, args.tokens, "constant"))
    rows[mode] = run
plain_ids = rows["plain"]["ids"]
for mode, run in rows.items():
    n = len(run["ids"])
    same = "" if mode == "plain" else f"  identical to plain: {run['ids'] == plain_ids}"
    acc = "" if run["acceptance_rate"] is None else f"  acceptance {run['acceptance_rate']:.2f}"
    print(f"{mode:<12} {n} tokens in {run['seconds']:.2f} s = {n / run['seconds']:.1f} tok/s{acc}{same}")
plain_tps = len(plain_ids) / rows["plain"]["seconds"]
for mode in ("spec", "hf_assisted"):
    print(f"{mode} / plain: {len(rows[mode]['ids']) / rows[mode]['seconds'] / plain_tps:.2f}x")
print(f"ours / transformers assisted: {rows['hf_assisted']['seconds'] / rows['spec']['seconds'] * len(rows['spec']['ids']) / len(rows['hf_assisted']['ids']):.2f}x")
PY
