"""How well each draft variant agrees with the target, in seconds instead of a benchmark's minutes.

The target's own greedy output (prompt + N tokens) is fed through a draft variant in one forward
pass; the share of positions where the draft's argmax equals the target's next token is the
greedy acceptance probability of a first draft token. Also prints one draft pass (median, 200
cached positions), resident memory, and how much of the target's output a truncated head's
subset covers. This is how the int4 recipe in specdec/kernels/variants.py was chosen (docs/benchmarks.md).

    HF_HUB_OFFLINE=1 python scripts/draft_agreement.py bf16 int8 int4 int4-v32k
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specdec.core.cached_model import CachedModel  # noqa: E402
from specdec.kernels.cpu_linear import linear_for  # noqa: E402
from specdec.core.config import GenerationConfig  # noqa: E402
from specdec.engines.assemble import generate  # noqa: E402
from specdec.models.pair import load_pair  # noqa: E402
from specdec.kernels.variants import draft_model, head_ids, parse_variant, resident_gb  # noqa: E402

EXTRA = [  # beyond the bench prompts: prose and a translation, where drafts are accepted least
    {"id": "story", "prompt": "Write a short story (about 150 words) about a lighthouse keeper who finds a message in a bottle."},
    {"id": "german", "prompt": "Übersetze ins Deutsche: The weather was cold, so we stayed inside, drank tea and read books all afternoon."},
    {"id": "qa", "prompt": "Why is the sky blue? Answer in three sentences."},
]


@torch.inference_mode()
def agreement(model, refs) -> dict:
    out = {}
    for r in refs:
        seq = torch.tensor(r["prompt"] + r["out"])[None]  # (1, n)
        logits = model(input_ids=seq).logits[0]  # (n, V)
        n = len(r["prompt"])
        out[r["id"]] = (logits[n - 1 : -1].argmax(-1) == torch.tensor(r["out"])).float().mean().item()
    return out


def pass_ms(model, pair, context: list[int], n: int = 15) -> float:
    lm = CachedModel(model, pair.vocab_size, linear=linear_for(model))
    lm.prefill(torch.tensor(context[:200]))
    times = []
    for i in range(n):
        t = time.perf_counter()
        lm.forward(torch.tensor([context[i % len(context)]]), last_only=True)
        times.append(time.perf_counter() - t)
        lm.crop(min(200, len(context)))
    return 1000 * statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--pair", default=None)
    parser.add_argument("--prompts", default=str(Path(__file__).resolve().parent.parent / "assets" / "bench_prompts.json"))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--refs", help="cache the target's outputs in this JSON file (they take minutes to make)")
    args = parser.parse_args()
    pair = load_pair(args.pair)
    if args.refs and Path(args.refs).exists():
        refs = json.loads(Path(args.refs).read_text())
    else:
        refs = []
        for p in json.loads(Path(args.prompts).read_text()) + EXTRA:
            ids = pair.encode_prompt(p["prompt"], chat=p.get("chat", pair.chat), max_new_tokens=args.tokens)
            events = generate(pair, p["prompt"], GenerationConfig(max_new_tokens=args.tokens, k=5), chat=p.get("chat"))
            refs.append({"id": p["id"], "prompt": ids, "out": [t for e in events for t in e.emitted]})
        if args.refs:
            Path(args.refs).write_text(json.dumps(refs))
    outputs = [t for r in refs for t in r["out"]]
    print(f"{len(refs)} prompts, {len(outputs)} target tokens")
    for name in args.variants:
        spec = parse_variant(name)
        t = time.perf_counter()
        model = draft_model(pair, name)
        ready = time.perf_counter() - t
        agree = agreement(model, refs)
        line = (f"{name:10s} ready in {ready:5.1f} s  pass {pass_ms(model, pair, refs[0]['prompt'] + refs[0]['out']):6.1f} ms  "
                f"resident {resident_gb(model):.3f} GB  agreement {statistics.fmean(agree.values()):.3f}")
        if spec.vocab:
            kept = set(head_ids(pair, spec).tolist())
            line += f"  subset covers {sum(t in kept for t in outputs) / len(outputs):.3f} of the output"
        print(line + "  (" + ", ".join(f"{k} {v:.2f}" for k, v in agree.items()) + ")", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
