"""The app in a real browser: headless Debian chromium driven by Playwright, on tiny-random.

The app runs in $SPECDEC_DTYPE (fp32 when unset), never in the CPU's automatic choice, so the
result does not depend on which CPU runs the suite; `make test` runs this module in fp32 and in bf16."""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"

DTYPE = os.environ.get("SPECDEC_DTYPE") or "fp32"

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (make test installs it)"),
    pytest.mark.precision,
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1500})
        page.goto(app_url)
        page.wait_for_selector("#generate")
        yield page
        browser.close()


def set_max_new_tokens(page, value: int) -> None:
    box = page.locator("#max-new-tokens input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def test_generate_streams_coloured_tokens_stats_and_plots(page):
    from playwright.sync_api import expect

    page.get_by_text("code: python-function").click()
    expect(page.locator("#prompt textarea")).to_have_value(re.compile("merge_intervals"), timeout=30_000)
    set_max_new_tokens(page, 96)
    page.click("#generate")
    page.wait_for_selector("#stats .badge", timeout=120_000)  # the badge appears when both runs are done
    spec = page.locator("#spec-pane")
    kinds = {k: spec.locator(f".tok-{k}").count() for k in ("accepted", "rejected", "correction", "bonus")}
    assert kinds["accepted"] > 0 and kinds["rejected"] > 0 and kinds["correction"] > 0, kinds
    assert page.locator("#plain-pane .tok-plain").count() > 0
    assert page.locator("#plain-pane .tok-accepted").count() == 0
    badge = page.locator("#stats .badge").inner_text()
    if DTYPE == "fp32":
        assert "identical to plain decoding" in badge
    else:  # a near-tie may flip a token in bf16/fp16; the badge must then say where, with the margin, and call it a tie
        tie = re.search(r"differs at token \d+: spec .* vs plain .*, target top-2 logit margin \d+\.\d{4}: a numerical tie", badge)
        assert "identical to plain decoding" in badge or tie, badge
    assert f"({DTYPE})" in page.locator("#status").inner_text()  # the override reached the app
    assert "acceptance rate" in page.locator("#stats").inner_text()
    for plot in ("acceptance-plot", "throughput-plot", "tokens-per-pass-plot"):
        assert page.locator(f"#{plot} .js-plotly-plot .trace").count() > 0, plot
    title = spec.locator(".tok-rejected").first.get_attribute("title")
    assert "p_target" in title and "p_draft" in title
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"browser-tiny-random-{DTYPE}.png"), full_page=True)


def test_stop_cancels_and_app_answers_next_request(page):
    set_max_new_tokens(page, 1024)
    page.click("#generate")
    page.wait_for_function("document.querySelectorAll('#spec-pane .tok').length > 5", timeout=60_000)
    page.click("#stop")
    page.wait_for_function("document.querySelector('#status').innerText.includes('stopped')", timeout=30_000)
    shown = page.locator("#spec-pane .tok").count()
    assert shown < 1024
    set_max_new_tokens(page, 16)
    page.click("#generate")
    page.wait_for_selector("#stats .badge", timeout=60_000)
    assert "stopped" not in page.locator("#status").inner_text()


def test_bad_input_is_reported_and_app_stays_up(page):
    page.locator("#prompt textarea").fill("   ")
    page.click("#generate")
    page.wait_for_function("document.querySelector('#status').innerText.includes('prompt must be non-empty')", timeout=30_000)
    page.locator("#prompt textarea").fill("def f(x):")
    set_max_new_tokens(page, 16)
    page.click("#generate")
    page.wait_for_function("document.querySelector('#status').innerText.includes('tiny-random')", timeout=60_000)
    # The run's first frame clears the badge; wait for the run to end, since a click on Generate
    # while a run is pending is dropped (Gradio's trigger_mode "once"), and the next test clicks it.
    page.wait_for_selector("#stats .badge", timeout=60_000)


def test_draft_variant_and_the_lossy_lane(page):
    box = page.locator("#draft-variant input")
    box.click()
    box.fill("int8")
    page.get_by_role("option", name="int8", exact=True).click()
    page.locator("#plain-int4 input").check()
    page.locator("#prompt textarea").fill("for i in range(10):")
    set_max_new_tokens(page, 24)
    page.click("#generate")
    page.wait_for_selector("#lossy-note .badge", timeout=120_000)  # written once the lossy lane has finished
    assert "draft variant int8" in page.locator("#status").inner_text()
    note = page.locator("#lossy-note").inner_text()
    assert "int4 target:" in note and ("departs from the exact target at token" in note or "the same 24 tokens" in note), note
    assert page.locator("#lossy-pane .tok-plain").count() > 0
    page.locator("#plain-int4 input").uncheck()
