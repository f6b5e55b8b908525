"""How the app holds up as a public Space, measured from outside through gradio_client.

Starts app.py on a free loopback port twice and writes every figure and every input tried, with
what came back, to docs/reliability.md:

  on tiny-random (fp32): visitors at once (N = 1, 4, 16, each with its own prompt and seed, each
    output checked against the same request made alone), bad input, and a client that drops
    mid-run;
  on the embedded pair (needs its converted copy; loads 5-8 GB, so this part holds the machine's
    measurement lock, specdec.measure.lock, as the bench does): a pair switch that fails and one
    that works, with the default pair's speed before and after, a dropped client, and resident
    memory over 30 consecutive runs.

    python -m scripts.reliability [--out docs/reliability.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import psutil

from scripts.reliability_requests import EXAMPLES, bad_input, call, cell, visitors
from specdec.measure.lock import one_measurement
from specdec.models import machine as machine_facts  # machine() here describes it in one line
from app.client import Visitor, start_app

ROOT = Path(__file__).resolve().parent.parent

EMBEDDED = "qwen2.5-coder-1.5b/0.5b"

DROPPER = textwrap.dedent("""
    import sys, time
    from app.client import Visitor
    visitor = Visitor(sys.argv[1])
    start = time.perf_counter()
    job = visitor.submit(prompt="def f(x):", pair=sys.argv[2], max_new_tokens=int(sys.argv[3]), compare=True)
    for i, _ in enumerate(job):
        print(f"frame {time.perf_counter() - start:.4f}", flush=True)
        if i == 5:
            print("drop", flush=True)
            time.sleep(60)
""")


def dropped_client(url: str, pair: str, max_new_tokens: int, report: list[str], tries: int = 3) -> None:
    visitor = Visitor(url)

    def short_request() -> float:
        return call(visitor, first=True, prompt="def g(y):", pair=pair, max_new_tokens=8).first_s

    idle = statistics.median(short_request() for _ in range(3))
    after, intervals, dropped_at = [], [], []
    for _ in range(tries):
        client = subprocess.Popen([sys.executable, "-c", DROPPER, url, pair, str(max_new_tokens)],
                                  stdout=subprocess.PIPE, text=True, cwd=ROOT)  # run from the checkout: app.client
        frames = []
        for line in client.stdout:
            if line.startswith("frame"):
                frames.append(float(line.split()[1]))
            if line.startswith("drop"):
                break
        client.kill()  # the connection drops without a word, as when a laptop lid closes
        client.wait()
        after.append(short_request())
        intervals += [b - a for a, b in zip(frames, frames[1:])]
        dropped_at.append(frames[-1])
    step = statistics.median(intervals)
    extra = statistics.median(after) - idle
    from app.live import HTML_EVERY_S  # the app's fastest frame rate
    report += [f"- **{pair}**: {tries} times, a client asked for {max_new_tokens} new tokens with the plain run and "
               f"was killed after 6 frames ({min(dropped_at):.1f}-{max(dropped_at):.1f} s in); left running, each "
               f"would have held the worker for up to {2 * max_new_tokens} tokens. The next request's first frame "
               f"came after **{statistics.median(after):.2f} s** (median; max {max(after):.2f} s), against "
               f"{idle:.2f} s when the app is idle (median of 3): {extra:+.2f} s, "
               f"{'within' if extra <= step else 'MORE than'} one frame interval of the dropped run "
               f"({step:.2f} s; a frame comes every step, or every {HTML_EVERY_S:g} s when steps are faster)."]


def zerogpu_durations(report: list[str]) -> None:
    """What the app would ask ZeroGPU for (computed, not measured: no ZeroGPU here)."""
    from specdec.core.config import GenerationConfig
    from specdec.serving.gpu_budget import PassCosts, call_seconds, max_new_tokens_within

    costs = PassCosts()
    report += ["## ZeroGPU durations (computed)", "",
               "What `spaces.GPU` is asked for per request, from the estimated pass costs "
               f"({costs.draft_s * 1e3:.0f} ms draft, {costs.verify_s * 1e3:.0f} ms verify, "
               f"{costs.decode_s * 1e3:.0f} ms decode, {costs.setup_s:.0f} s setup) before the app has measured its own; "
               "a worst case, every draft rejected. Not measured on ZeroGPU.", "",
               "| max new tokens | K | with the plain run | seconds asked |", "|---|---|---|---|"]
    for n, k, compare in ((64, 5, True), (128, 5, True), (176, 5, True), (1024, 5, True), (1024, 5, False), (128, 16, True)):
        seconds = call_seconds(GenerationConfig(max_new_tokens=n, k=k), compare, costs)
        report.append(f"| {n} | {k} | {'yes' if compare else 'no'} | {seconds:.0f} |")
    fits = {limit: max_new_tokens_within(limit, GenerationConfig(k=5), True, costs) for limit in (60, 120)}
    report += ["", f"With K=5 and the plain run, at most {fits[60]} new tokens fit a 60 s call (the slider ends at "
               f"{fits[60] // 8 * 8}) and {fits[120]} fit 120 s (`SPECDEC_GPU_SECONDS=120`).", ""]


# ---- embedded pair --------------------------------------------------------------------------------

def pair_switch(url: str, start_s: float, report: list[str]) -> None:
    visitor = Visitor(url)
    prompt = EXAMPLES[0]

    def default_runs():
        runs = [call(visitor, first=True, prompt=prompt, max_new_tokens=16, compare=False) for _ in range(3)]
        return statistics.median(r.first_s for r in runs), statistics.median(r.done_s for r in runs), runs[-1].status

    first_before, done_before, status = default_runs()
    failing = call(visitor, prompt=prompt, pair="smollm2-1.7b/135m")
    first_after, done_after, _ = default_runs()
    # with the settings the page sets when its pair changes to tiny-random (app.advanced.pair_defaults):
    # the embedded pair's drafter may be one tiny-random has no head for
    from app.advanced import PAIR_CONTROLS, pair_defaults
    from specdec.models.pair import pick_device

    tiny_settings = dict(zip(PAIR_CONTROLS, pair_defaults("tiny-random", pick_device())))  # its line, last, left out
    tiny = call(visitor, prompt="def f(x):", pair="tiny-random", max_new_tokens=8, **tiny_settings)
    first_back, done_back, _ = default_runs()
    report += ["## Switching pairs (embedded pair as the default)", "",
               f"Default pair: `{cell(status)}`. Offered: the embedded pair, tiny-random, and SmolLM2, which is "
               "listed in SPECDEC_PAIRS but cannot load offline. Each default-pair figure is the median of 3 "
               "requests of 16 new tokens without the plain run.", "",
               "| step | first frame (s) | whole request (s) | returned |", "|---|---|---|---|",
               f"| default pair, before | {first_before:.2f} | {done_before:.2f} | |",
               f"| switch to smollm2-1.7b/135m (fails) | | {failing.done_s:.2f} | {cell(failing.error or failing.status, 400)} |",
               f"| default pair, after the failed switch | {first_after:.2f} | {done_after:.2f} | |",
               f"| switch to tiny-random (works) | | {tiny.done_s:.2f} | {cell(tiny.error or tiny.status)} |",
               f"| default pair, after that | {first_back:.2f} | {done_back:.2f} | |", "",
               f"After the failed switch the default pair's requests took {done_after / done_before:.2f}x as long as "
               f"before (first frame {first_after / first_before:.2f}x): it was not reloaded. (Starting the app, "
               f"which loads that pair, took {start_s:.1f} s; a reload would add about that to a request.)", ""]


def memory_series(url: str, pid: int, runs: int, report: list[str]) -> None:
    visitor = Visitor(url)
    process = psutil.Process(pid)
    before = process.memory_info().rss
    series, times = [], []
    for i in range(runs):
        r = call(visitor, prompt=EXAMPLES[i % len(EXAMPLES)], max_new_tokens=24, compare=True)
        if r.error or not r.status.startswith(EMBEDDED):
            raise RuntimeError(f"run {i + 1} failed: {r.error or r.status}")
        series.append(process.memory_info().rss)
        times.append(r.done_s)
        print(f"run {i + 1:2d}: {series[-1] / 2**20:8.1f} MiB resident, {r.done_s:.1f} s", flush=True)
    change = series[-1] / series[0] - 1
    report += [f"## Memory over {runs} consecutive runs (embedded pair)", "",
               f"One app process; each run 24 new tokens with the plain run, prompts cycling through the "
               f"{len(EXAMPLES)} examples. Resident memory of the app process (RSS) after each run, in MiB "
               f"({before / 2**20:.0f} MiB with the pair loaded, before run 1):", "",
               "```", *textwrap.wrap("  ".join(f"{i + 1}:{m / 2**20:.0f}" for i, m in enumerate(series)), 100), "```", "",
               f"After run {runs}: {series[-1] / 2**20:.0f} MiB, {change:+.1%} against run 1 "
               f"({'within' if abs(change) <= 0.10 else 'OUTSIDE'} the 10% bound); largest "
               f"{max(series) / 2**20:.0f} MiB. Median run {statistics.median(times):.1f} s.", ""]


# ---- the report -----------------------------------------------------------------------------------

@contextmanager
def app(env: dict):
    start = time.perf_counter()
    proc, url = start_app(env, timeout_s=600)
    try:
        yield proc, url, time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def machine() -> str:
    import gradio
    import torch
    import transformers

    return (f"{machine_facts.cpu_model()}, {machine_facts.cores()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
            f"avx512_bf16: {'yes' if 'avx512_bf16' in machine_facts.cpu_flags() else 'no'}; Python {platform.python_version()}, "
            f"torch {torch.__version__}, transformers {transformers.__version__}, gradio {gradio.__version__}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "reliability.md"))
    parser.add_argument("--runs", type=int, default=30, help="consecutive runs of the memory series")
    parser.add_argument("--parts", default="tiny,embedded", help="which apps to run: tiny, embedded or both")
    args = parser.parse_args(argv)
    report = ["# Reliability: the app as a public Space", "",
              f"Written by `python -m scripts.reliability` on {date.today()}: {machine()}. Every request goes "
              "through gradio_client to app.py on a loopback port, as an API client of a Space would. "
              "`tests/test_space.py`, `tests/test_pairs.py` and `tests/test_faults.py` check the same "
              "behaviours; this records the figures.", ""]

    parts = set(args.parts.split(","))
    tiny, embedded, dropped = [], [], ["## A client that leaves mid-run", ""]
    if "tiny" in parts:
        with app({"SPECDEC_PAIR": "tiny-random", "SPECDEC_DTYPE": "fp32",
                  "SPECDEC_PAIRS": "tiny-random,smollm2-1.7b/135m,qwen2.5-coder-7b/0.5b"}) as (_, url, _):
            print("visitors", flush=True)
            visitors(url, tiny)
            print("bad input", flush=True)
            bad_input(url, tiny)
            print("dropped client (tiny-random)", flush=True)
            dropped_client(url, "tiny-random", 1024, dropped)

    from specdec.models import bundle

    if "embedded" in parts and not bundle.is_converted():
        embedded += ["The embedded pair's converted copy is absent (`make prepare`): its parts were not run.", ""]
    elif "embedded" in parts:
        pairs = f"{EMBEDDED},tiny-random,smollm2-1.7b/135m"
        with one_measurement("python -m scripts.reliability"), app({"SPECDEC_PAIR": EMBEDDED, "SPECDEC_PAIRS": pairs}) as (proc, url, start_s):
            print("dropped client (embedded pair)", flush=True)
            dropped_client(url, EMBEDDED, 256, dropped)
            print("pair switch", flush=True)
            pair_switch(url, start_s, embedded)
            print("memory series", flush=True)
            memory_series(url, proc.pid, args.runs, embedded)
    zerogpu = []
    zerogpu_durations(zerogpu)
    report += tiny + dropped + [""] + embedded + zerogpu
    Path(args.out).write_text("\n".join(report).rstrip() + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
