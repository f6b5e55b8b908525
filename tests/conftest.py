import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network

import pytest

from specdec.events import check_invariants


@pytest.fixture(scope="session")
def tiny_pair():
    from specdec.models import load_pair

    # scripts/gpu_check.sh runs the parity tests on a GPU with SPECDEC_TEST_DEVICE=cuda.
    return load_pair("tiny-random", device=os.environ.get("SPECDEC_TEST_DEVICE", "cpu"), dtype="fp32")


def run_checked(pair, prompt, config, **kwargs):
    """Generate, check the event contract on the whole stream, return the events."""
    from specdec.engine import generate

    events = list(generate(pair, prompt, config, **kwargs))
    check_invariants(events)
    return events


def tokens(events):
    return [t for e in events for t in e.emitted]


def make_hub_cache(root, repo_id: str, files: dict, revision: str = "0" * 40):
    """A local Hugging Face cache entry for `repo_id` in the layout from_pretrained(local_files_only=True)
    reads (models--Org--Name/refs/main, snapshots/<rev>/<file>), each file a symlink to `files[name]`."""
    from pathlib import Path

    repo = Path(root) / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for name, source in files.items():
        (snapshot / name).symlink_to(Path(source).resolve())
    return snapshot


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(env: dict, timeout_s: float = 180):
    """Start app.py on a free loopback port with `env` added; (process, url) once the page answers.
    Retries on another port if the free one was taken before the app bound it."""
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    output = ""
    for _ in range(3):
        port = free_port()
        full = dict(os.environ, GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1", HF_HUB_OFFLINE="1",
                    GRADIO_ANALYTICS_ENABLED="False", **env)
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=Path(__file__).resolve().parent.parent, env=full,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
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
        output = proc.stdout.read().decode(errors="replace")
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
        values = dict(self.defaults, **{LABELS.get(k, k): v for k, v in settings.items()})
        return [values[label] for label in self.labels]

    def submit(self, **settings):
        return self.client.submit(*self.args(**settings), api_name="/generate")

    def run(self, **settings) -> tuple:
        return self.client.predict(*self.args(**settings), api_name="/generate")


# Short names for the page's controls, by label.
LABELS = {"prompt": "Prompt", "pair": "Model pair", "drafter": "Drafter", "k": "K: draft tokens per step",
          "adaptive_k": "Adaptive K (+2 after a full accept, -1 otherwise)", "temperature": "Temperature (0 = greedy)",
          "top_p": "Top-p", "max_new_tokens": "Max new tokens", "top_k": "Top-k (0 = off)", "seed": "Seed",
          "compare": "Compare with plain decoding", "show_rejected": "Show rejected draft tokens"}
