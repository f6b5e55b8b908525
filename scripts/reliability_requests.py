"""One request to the app as a Space visitor makes it, how the report prints what came back, and
the two checks of scripts/reliability.py that need only tiny-random: visitors at once and bad input."""

from __future__ import annotations

import html
import json
import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from app.client import Visitor, status_line

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [e["prompt"] for e in json.loads((ROOT / "assets" / "examples.json").read_text())]


@dataclass
class Result:
    status: str
    spec: str  # output text of the speculative pane
    plain: str  # output text of the plain pane
    first_s: float | None  # submit -> first frame
    done_s: float  # submit -> last frame
    error: str = ""


def text_of(pane) -> str:
    """The text in a token pane (rejected tokens hidden): span contents, unescaped. A request that did
    not start updates only its status line, and the panes come back as update markers."""
    return html.unescape(re.sub(r"<[^>]+>", "", pane)) if isinstance(pane, str) else ""


def call(visitor: Visitor, first: bool = False, **settings) -> Result:
    """One request; `first` also times the first frame (iterating polls, so only for one caller at a time)."""
    start = time.perf_counter()
    try:
        job = visitor.submit(**settings)
        first_s = None
        if first:
            for _ in job:
                first_s = first_s if first_s is not None else time.perf_counter() - start
        out = job.result()
        return Result(status_line(out[0]), text_of(out[1]), text_of(out[2]), first_s, time.perf_counter() - start)
    except Exception as err:  # recorded, never hidden: the report counts these as failed
        return Result("", "", "", None, time.perf_counter() - start, f"{type(err).__name__}: {err}")


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def cell(value, limit=150) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = html.escape(text if len(text) <= limit else text[: limit - 3] + "...", quote=False)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\x00", "\\x00")


# ---- tiny-random ----------------------------------------------------------------------------------

def visitors(url: str, report: list[str]) -> None:
    jobs = [dict(prompt=f"Visitor {i}: {EXAMPLES[i % len(EXAMPLES)][:80]}", seed=i, temperature=0.8, max_new_tokens=32,
                 compare=True, show_rejected=False) for i in range(16)]
    alone = [call(Visitor(url), **job) for job in jobs]
    distinct = len({(r.spec, r.plain) for r in alone})
    report += ["## Visitors at once (tiny-random)", "",
               "Each visitor has its own prompt and seed (sampled, temperature 0.8, 32 new tokens, with the plain "
               "run). Every request was first made alone; a response counts as mixed up when its two texts differ "
               f"from that visitor's alone. The {len(jobs)} lone responses are {distinct} distinct texts, so a "
               "mix-up would show. One generation runs at a time (the rest wait in Gradio's queue), so the "
               "latency grows with N by design.", "",
               "| N | completed | failed | mixed up | latency p50 (s) | p95 (s) | max (s) | wall (s) |", "|---|---|---|---|---|---|---|---|"]
    for n in (1, 4, 16):
        clients = [Visitor(url) for _ in range(n)]
        start = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            results = list(pool.map(lambda i: call(clients[i], **jobs[i]), range(n)))
        wall = time.perf_counter() - start
        failed = [r for r in results if r.error or not r.status.startswith("tiny-random")]
        mixed = [i for i, r in enumerate(results) if not r.error and (r.spec, r.plain) != (alone[i].spec, alone[i].plain)]
        times = [r.done_s for r in results]
        report.append(f"| {n} | {n - len(failed)} | {len(failed)} | {len(mixed)} | {statistics.median(times):.2f} | "
                      f"{percentile(times, 0.95):.2f} | {max(times):.2f} | {wall:.1f} |")
        for r in failed:
            report.append(f"<!-- failed: {cell(r.error or r.status)} -->")
    report.append("")


BAD_INPUT = [  # (what is tried, settings, field the message must name; None: must be served)
    ("K not a number", {"k": "five"}, "k"),
    ("K as numeric text", {"k": "5"}, "k"),
    ("K = 0", {"k": 0}, "k"),
    ("K = 40 (page allows 1..16)", {"k": 40}, "k"),
    ("K = 2.5", {"k": 2.5}, "k"),
    ("max new tokens = 5000", {"max_new_tokens": 5000}, "max_new_tokens"),
    ("max new tokens = 0", {"max_new_tokens": 0}, "max_new_tokens"),
    ("temperature = -1", {"temperature": -1}, "temperature"),
    ("temperature not a number", {"temperature": "hot"}, "temperature"),
    ("top-p = 2", {"top_p": 2}, "top_p"),
    ("top-k = -1", {"top_k": -1}, "top_k"),
    ("top-k = 1.5", {"top_k": 1.5}, "top_k"),
    ("seed = -1", {"seed": -1}, "seed"),
    ("seed empty", {"seed": None}, "seed"),
    ("unknown drafter", {"drafter": "oracle"}, "drafter"),
    ("unknown pair", {"pair": "gpt-9/1b"}, "pair"),
    ("pair hidden on a CPU", {"pair": "qwen2.5-coder-7b/0.5b"}, "pair"),
    ("pair as a list", {"pair": ["tiny-random"]}, "pair"),
    ("adaptive K not a boolean", {"adaptive_k": "yes"}, "k_policy adaptive"),
    ("compare not a boolean", {"compare": 1}, "compare"),
    ("empty prompt", {"prompt": ""}, "prompt"),
    ("whitespace prompt", {"prompt": " \n\t "}, "prompt"),
    ("prompt not text", {"prompt": 42}, "prompt"),
    ("100k-token prompt", {"prompt": "word " * 20_000}, "prompt"),  # 5 tokens per "word " for tiny-random
    ("NUL bytes", {"prompt": "def f(x):\x00\x00 return x"}, None),
    ("right-to-left marks", {"prompt": "\u202edef f(x):\u202c \u200fשלום"}, None),
    ("emoji and markup", {"prompt": "🚦🧪 <b>bold</b> &amp; <script>alert(1)</script> def f(x):"}, None),
]


def bad_input(url: str, report: list[str]) -> None:
    visitor = Visitor(url)
    report += ["## Bad input through the API (tiny-random)", "",
               "Sent to `/generate` with every other setting at its default. \"Named\" says whether the message "
               "names the field; the last three must be served.", "",
               "| input | value sent | returned | named |", "|---|---|---|---|"]
    for what, settings, field in BAD_INPUT:
        r = call(visitor, **{"prompt": "def f(x):", "max_new_tokens": 8, **settings})
        value = next(iter(settings.values()))
        shown = f"{value[:24]!r}... ({len(value)} chars)" if isinstance(value, str) and len(value) > 60 else value
        returned = r.error or r.status
        if field is None:
            ok = r.status.startswith("tiny-random")
            returned += f"; output {len(r.spec)} characters"
        else:
            ok = r.status.startswith(f"Not started: {field} ")
        report.append(f"| {cell(what)} | {cell(shown, 60)} | {cell(returned)} | {'yes' if ok else 'NO'} |")
    status = call(visitor, prompt="def f(x):", max_new_tokens=8).status
    report += ["", f"After all of them the app still served: `{cell(status)}`.", ""]
