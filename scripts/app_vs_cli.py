"""Does the page slow the engine it measures? Tokens/s of the same run in the CLI and in the app.

Each repeat runs the same prompt, settings and pair three times, each in fresh processes:
  cli       `python -m specdec generate --compare --json`, nothing else running;
  cli+page  the same, while headless chromium shows the app's page, idle (the app loads no model):
            what an open page costs the machine before the app does anything;
  app       through the app with headless chromium attached: it clicks Generate and waits for both
            runs to finish, as a viewer would.
It prints every figure, the medians, and each mode over the CLI as a ratio; also the CPU seconds
the browser and the app server used meanwhile. Nothing else should run meanwhile: it keeps both
cores of a 2-core machine busy.

    HF_HUB_OFFLINE=1 .venv/bin/python -m scripts.app_vs_cli [--repeats 3]

`--root DIR` runs the CLI and the app of another checkout (e.g. an export of an older commit),
to measure before and after a change with the same script.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from app import client

ROOT = Path(__file__).resolve().parent.parent  # replaced by --root
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def cli_run(args, prompt: str) -> dict:
    cmd = [sys.executable, "-m", "specdec", "generate", "--pair", args.pair, "--prompt", prompt, "--k", str(args.k),
           "--max-new-tokens", str(args.max_new_tokens), "--compare", "--json"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return {"spec": result["metrics"]["tokens_per_s"], "plain": result["plain"]["tokens_per_s"],
            "c": result["metrics"]["cost_ratio_c"], "tokens": len(result["tokens"])}


def start_app(pair: str, preload: bool = True) -> tuple[subprocess.Popen, str]:
    """The app of the checkout measured (ROOT), on the pair, loading it at start or not."""
    return client.start_app({"SPECDEC_PAIR": pair, "SPECDEC_PRELOAD": "1" if preload else "0"}, timeout_s=600, root=ROOT)


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def stats_row(page) -> dict:
    """The stats row as {label: text}."""
    labels = page.locator("#stats .stat-label").all_inner_texts()
    values = page.locator("#stats .stat-value").all_inner_texts()
    return dict(zip(labels, values))


def open_page(p, url: str):
    browser = p.chromium.launch(executable_path=CHROMIUM,
                                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page.goto(url)
    page.wait_for_selector("#generate")
    return browser, page


def browser_processes() -> list[psutil.Process]:
    return [c for c in psutil.Process().children(recursive=True) if "chrom" in c.name().lower()]


def cli_with_page_run(args, prompt: str) -> dict:
    """The CLI's run while the app's page is open in the browser, idle; the app holds no model."""
    from playwright.sync_api import sync_playwright

    proc, url = start_app(args.pair, preload=False)
    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url)
            time.sleep(2)
            browsers, server = browser_processes(), psutil.Process(proc.pid)
            before = cpu_seconds(browsers), cpu_seconds([server])
            result = cli_run(args, prompt)
            after = cpu_seconds(browsers), cpu_seconds([server])
            browser.close()
        result.update(browser_cpu_s=after[0] - before[0], server_cpu_s=after[1] - before[1])
        return result
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def app_run(args, prompt: str) -> dict:
    from playwright.sync_api import sync_playwright

    proc, url = start_app(args.pair)
    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url)
            page.locator("#prompt textarea").fill(prompt)
            for elem, value in (("k", args.k), ("max-new-tokens", args.max_new_tokens)):
                box = page.locator(f"#{elem} input[type=number]")
                box.fill(str(value))
                box.press("Enter")
            server, browsers = psutil.Process(proc.pid), browser_processes()
            before = cpu_seconds(browsers), cpu_seconds([server])
            page.click("#generate")
            page.wait_for_selector("#stats .badge", timeout=1_800_000)
            after = cpu_seconds(browsers), cpu_seconds([server])
            result = {"browser_cpu_s": after[0] - before[0], "server_cpu_s": after[1] - before[1]}
            result.update(exported(page, args.save_run) or shown(page))
            browser.close()
        return result
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def exported(page, save_to: Path | None = None) -> dict | None:
    """Exact figures from the page's JSON export, when the page has one (kept at `save_to` if given)."""
    if not page.locator("#export-json").count():
        return None
    with page.expect_download(timeout=60_000) as download:
        page.click("#export-json")
    path = Path(tempfile.mkdtemp()) / "run.json"
    download.value.save_as(path)
    record = json.loads(path.read_text())
    if save_to:
        shutil.copyfile(path, save_to)
    metrics = record["metrics"]
    return {"spec": metrics["speculative"]["tokens_per_s"], "plain": metrics["plain"]["tokens_per_s"],
            "c": metrics["speculative"]["cost_ratio_c"], "tokens": metrics["speculative"]["tokens"]}


def shown(page) -> dict:
    """Figures as the stats row shows them (one decimal), for a page without an export."""
    row = stats_row(page)
    number = lambda label: float(re.sub(r"[^0-9.]", "", row[label]))  # noqa: E731
    return {"spec": number("speculative tok/s"), "plain": number("plain tok/s"), "c": number("cost ratio c"), "tokens": None}


def main() -> int:
    global ROOT
    # A background job ignores SIGINT, and SIGTERM would skip the clean-up: both end the run through
    # Python's exceptions, so the app and the browser it started are stopped with it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="qwen2.5-coder-1.5b/0.5b")
    ap.add_argument("--prompt-id", default="python-function", help="an id from assets/examples.json")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="cli,cli+page,app", help="which of cli, cli+page, app to run (comma-separated)")
    ap.add_argument("--save-run", type=Path, help="keep the app's JSON export of the last repeat here")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose CLI and app are measured")
    args = ap.parse_args()
    ROOT = args.root.resolve()
    examples = json.loads((ROOT / "assets" / "examples.json").read_text())
    prompt = next(e["prompt"] for e in examples if e["id"] == args.prompt_id)
    flags = subprocess.run("lscpu", capture_output=True, text=True).stdout
    print(f"checkout {ROOT}, pair {args.pair}, prompt {args.prompt_id}, K={args.k}, {args.max_new_tokens} tokens, "
          f"{os.cpu_count()} cores, avx512_bf16: {'yes' if 'avx512_bf16' in flags else 'no'}, "
          f"SPECDEC_DTYPE={os.environ.get('SPECDEC_DTYPE') or '(automatic)'}")
    every = {"cli": cli_run, "cli+page": cli_with_page_run, "app": app_run}
    modes = {m: every[m] for m in args.modes.split(",")}
    runs = {mode: [] for mode in modes}
    for r in range(args.repeats):
        for mode, fn in modes.items():
            result = fn(args, prompt)
            runs[mode].append(result)
            extra = (f", browser {result['browser_cpu_s']:.1f} CPU s, app server {result['server_cpu_s']:.1f} CPU s"
                     if "browser_cpu_s" in result else "")
            print(f"repeat {r + 1} {mode:8s}: speculative {result['spec']:.2f} tok/s, plain {result['plain']:.2f} tok/s, "
                  f"c {result['c']:.3f}{extra}", flush=True)
    print("medians (and over the CLI's):")
    med = {m: {key: statistics.median(x[key] for x in rs) for key in ("spec", "plain", "c")} for m, rs in runs.items()}
    for key, name in (("spec", "speculative tok/s"), ("plain", "plain tok/s"), ("c", "cost ratio c")):
        cells = [f"{m} {med[m][key]:7.3f}" + (f" ({med[m][key] / med['cli'][key]:.3f})" if m != "cli" and "cli" in med else "")
                 for m in modes]
        print(f"  {name:18s} " + "   ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
