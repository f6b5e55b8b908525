"""The app in a real browser, as the browser tests start it: Debian's chromium, the app on tiny-random
in $SPECDEC_DTYPE (fp32 when unset) on a free port, its log and screenshots under artifacts/, and
the page controls several modules use. `app_url` is registered for every test module by tests/conftest.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app.client import free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]  # the repository
ARTIFACTS = ROOT / "artifacts"
DTYPE = os.environ.get("SPECDEC_DTYPE") or "fp32"


@pytest.fixture(scope="module")
def app_url():
    for attempt in range(3):  # another process may take the free port before the app binds it
        proc, url, output = start_app(free_port())
        if proc is not None:
            break
        if "address already in use" not in output.lower() and "cannot find empty port" not in output.lower():
            pytest.fail("app exited: " + output[-2000:])
    else:
        pytest.fail("app could not bind a free port in 3 tries: " + output[-2000:])
    yield url
    proc.terminate()
    proc.wait(timeout=20)


def start_app(port: int):
    """(process, url, "") once the page answers, or (None, url, output) if the app exited first."""
    env = dict(os.environ, SPECDEC_PAIR="tiny-random", SPECDEC_DTYPE=DTYPE, GRADIO_SERVER_PORT=str(port),
               GRADIO_SERVER_NAME="127.0.0.1", HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")
    # The app's output goes to a file, not a pipe: a pipe nobody reads fills up and blocks the app mid-run.
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / f"browser-app-{DTYPE}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc, url, ""
        except OSError:
            if proc.poll() is not None:
                log.close()
                return None, url, log_path.read_text(errors="replace")
            time.sleep(0.5)
    proc.kill()
    pytest.fail("app did not start within 180 s")


def open_advanced(page) -> None:
    """Unfold the Advanced settings (closed when the page opens) so their controls can be used."""
    if not page.locator("#drafter").is_visible():
        page.locator("#advanced .label-wrap").first.click()
        page.locator("#drafter").wait_for(state="visible")


def set_max_new_tokens(page, value: int) -> None:
    box = page.locator("#max-new-tokens input[type=number]")
    box.fill(str(value))
    box.press("Enter")
