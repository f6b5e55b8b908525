"""The page's API from outside, as a visitor would call it: start app.py on a free loopback port, and
call its /generate endpoint through gradio_client with the settings given by name. Nothing of the
page is imported: what this reaches is what a Space's API client reaches. Used by the tests and by
scripts/reliability.py and scripts/reliability_requests.py (run from the repository root as
`python -m scripts.x`)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from html import unescape
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(env: dict, timeout_s: float = 180, root: Path = ROOT):
    """Start `root`'s app.py (this checkout's, or another one's to compare with) on a free loopback
    port with `env` added; (process, url) once the page answers. The app's output goes to a
    temporary file (a pipe nobody reads would fill and stall it). Retries on another port if the
    free one was taken before the app bound it."""
    output = ""
    for _ in range(3):
        port = free_port()
        full = dict(os.environ, GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1", HF_HUB_OFFLINE="1",
                    GRADIO_ANALYTICS_ENABLED="False", **env)
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=root, env=full, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/"
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            try:
                urllib.request.urlopen(url, timeout=2)
                return proc, url
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.5)
        else:
            proc.kill()
            raise RuntimeError(f"app did not answer within {timeout_s} s")
        log.seek(0)
        output = log.read().decode(errors="replace")
        if "address already in use" not in output.lower():
            break
    raise RuntimeError("app exited: " + output[-2000:])


class Visitor:
    """A gradio_client session on the app's /generate endpoint, with settings given by their labels."""

    def __init__(self, url: str):
        from gradio_client import Client

        self.client = Client(url, verbose=False)
        params = self.client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/generate"]["parameters"]
        self.labels = [p["label"] for p in params]
        self.defaults = {p["label"]: p["parameter_default"] for p in params}

    def args(self, **settings) -> list:
        named = {LABELS.get(k, k): v for k, v in settings.items()}
        unknown = sorted(set(named) - set(self.labels))
        if unknown:  # a misspelt setting would otherwise be sent as the page's default, unnoticed
            raise ValueError(f"/generate has no setting {', '.join(map(repr, unknown))}; its settings: {', '.join(self.labels)}")
        values = dict(self.defaults, **named)
        return [values[label] for label in self.labels]

    def submit(self, **settings):
        return self.client.submit(*self.args(**settings), api_name="/generate")

    def run(self, **settings) -> tuple:
        return self.client.predict(*self.args(**settings), api_name="/generate")


def status_line(status_html) -> str:
    """The text of the status line, the first output of /generate (HTML: app.render.render_status),
    as the page shows it: its one line, without what its disclosure holds; "" for anything else."""
    found = re.search(r"<(?:summary|p class=\"status-line\")>(.*?)</", status_html, re.S) if isinstance(status_html, str) else None
    return unescape(found.group(1)) if found else ""


def status_details(status_html) -> str:
    """What the status line's disclosure holds (where the pair is from, its kernel's faithfulness); "" where none."""
    found = re.search(r"</summary><p>(.*?)</p>", status_html, re.S) if isinstance(status_html, str) else None
    return unescape(found.group(1)) if found else ""


# Short names for the page's controls, by label.
LABELS = {"prompt": "Prompt", "pair": "Model pair", "drafter": "Drafter", "k": "K: draft tokens per step",
          "adaptive_k": "Adaptive K (+2 after a full accept, -1 otherwise)", "temperature": "Temperature (0 = greedy)",
          "top_p": "Top-p", "max_new_tokens": "Max new tokens", "top_k": "Top-k (0 = off)", "seed": "Seed",
          "compare": "Compare with plain decoding", "show_rejected": "Show rejected draft tokens",
          "draft_variant": "Draft variant", "plain_int4": "Plain decoding, int4 target (lossy)",
          "cost_k": "K from this machine's pass costs (0 where drafting would not pay)", "target_kernel": "Target kernel",
          "runner": "Runner", "engine": "Engine", "adaptive": "Adaptive K (+2 after a full accept, -1 otherwise)"}
