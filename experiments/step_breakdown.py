"""Where a target kernel's decode step goes: its matrix products, the output head, and the rest
(norms, attention, rotary, the cache, Python), each timed inside real steps of the embedded pair.

An experiment kept for work on the kernels (docs/benchmarks.md, "Where a decode step's time goes");
whole passes are timed by `python -m specdec passes`.

    python -m experiments.step_breakdown [--kernel w4a8] [--steps 10] [--context 200]

Three runs of the same steps, each the median of --steps:

- as built: every product timed where it is called (its module's forward wrapped), so the rest is
  the step less the products;
- products as zeros: what the rest costs on its own (as `passes --without-products` times it);
- products as zeros, each followed by a sum over its share of a 1 GiB buffer: the rest after each
  product has streamed as many bytes through the caches as the weights do. The sums are also timed
  alone, so the rest is the step less those sums.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import types

import torch
from torch import nn


def steps(model: nn.Module, context: int, count: int, spent: dict | None = None) -> tuple[list[float], list[dict]]:
    """Seconds of `count` decode steps after a prefill of `context` random tokens (two warm-up steps
    first), and a copy of `spent` after each (cleared before each step: the wrapped products add to it)."""
    from transformers import DynamicCache

    ids = torch.randint(0, 30000, (1, context))
    times, products_s = [], []
    with torch.inference_mode():
        cache = DynamicCache()
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        token = ids[:, -1:]
        for i in range(count + 2):
            if spent is not None:
                spent.clear()
            start = time.perf_counter()
            model(input_ids=token, past_key_values=cache, use_cache=True)
            if i >= 2:
                times.append(time.perf_counter() - start)
                products_s.append(dict(spent or {}))
    return times, products_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", default="w4a8")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--context", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    from specdec.kernels.target_kernels import kernel_target
    from specdec.measure.passcost import no_products, products
    from specdec.models.pair import load_pair

    pair = load_pair("qwen2.5-coder-1.5b/0.5b", device="cpu")
    model = kernel_target(pair, args.kernel)
    layers = products(model)
    head = model.get_output_embeddings()

    spent: dict = {}
    for layer in layers:
        def timed(self, x, forward=type(layer).forward):
            start = time.perf_counter()
            y = forward(self, x)
            key = "head" if self is head else "products"
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - start
            return y
        layer.forward = types.MethodType(timed, layer)
    times, split = steps(model, args.context, args.steps, spent)
    step = statistics.median(times)
    in_layers = statistics.median(s.get("products", 0.0) for s in split)
    in_head = statistics.median(s.get("head", 0.0) for s in split)
    print(f"{args.kernel}: decode step {step * 1e3:.1f} ms = products {in_layers * 1e3:.1f} + output head {in_head * 1e3:.1f}"
          f" + the rest {(step - in_layers - in_head) * 1e3:.1f} ms")

    buffer = torch.ones(256 * 2**20)  # 1 GiB of float32, read in one share per product
    share, calls = buffer.numel() // len(layers), [0]

    def streamed_zeros(self, x):
        i = calls[0] % len(layers)
        calls[0] += 1
        buffer[i * share : (i + 1) * share].sum()
        return x.new_zeros(*x.shape[:-1], self.out_features)

    for layer in layers:
        del layer.forward  # the timed wrapper: back to the class's forward
    with no_products(model):
        rest = statistics.median(steps(model, args.context, args.steps)[0])
    print(f"products as zeros: the rest alone {rest * 1e3:.1f} ms")
    for layer in layers:
        layer.forward = types.MethodType(streamed_zeros, layer)
    rest = statistics.median(steps(model, args.context, args.steps)[0])
    alone = []
    for _ in range(args.steps):
        start = time.perf_counter()
        for i in range(len(layers)):
            buffer[i * share : (i + 1) * share].sum()
        alone.append(time.perf_counter() - start)
    streamed = statistics.median(alone)
    print(f"products as zeros, each followed by its share of 1 GiB read: step {rest * 1e3:.1f} ms, the reads alone "
          f"{streamed * 1e3:.1f} ms, so the rest {(rest - streamed) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
