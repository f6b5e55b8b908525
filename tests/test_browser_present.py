"""Presenting, in a real browser: run, export JSON and CSV, reload the page, upload the JSON, replay
it at 2x, and screenshots of the lecture-hall view in both themes (artifacts/lecture-*.png).

The screenshots show a recorded run of the real pair (assets/runs/, loaded from the file, no model
needed), so they show what an audience would read; the run itself is tiny-random in fp32."""

import csv
import json
import os
import re

import pytest

from specdec.record.run_file import CSV_COLUMNS, VERSION
from tests.support.browser import ARTIFACTS, CHROMIUM, ROOT, set_max_new_tokens

DEMO_RUN = ROOT / "assets" / "runs" / "qwen2.5-coder-python-function.json"

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (make test installs it)")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


def spec_html(page) -> str:
    return page.locator("#spec-pane .tokens").inner_html()


def upload(page, path) -> None:
    page.locator("#export-bar input[type=file]").set_input_files(str(path))
    page.wait_for_function("document.querySelector('#status').innerText.includes('Loaded from a file')", timeout=30_000)


def test_run_export_reload_upload_and_replay_at_2x(browser, app_url, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1400}, accept_downloads=True)
    page.goto(app_url)
    page.wait_for_selector("#generate")
    page.locator("#prompt textarea").fill("def merge(a, b):")
    set_max_new_tokens(page, 96)
    page.click("#generate")
    page.wait_for_selector("#stats .badge", timeout=120_000)
    page.wait_for_selector("#export-json:not([disabled])", timeout=30_000)
    live_html, live_stats = spec_html(page), page.locator("#stats").inner_text()

    with page.expect_download() as download:
        page.click("#export-json")
    saved = tmp_path / "run.json"
    download.value.save_as(saved)
    record = json.loads(saved.read_text())
    assert record["version"] == VERSION and record["pair"]["name"] == "tiny-random"
    assert record["metrics"]["speculative"]["target_passes"] == len(record["runs"]["speculative"])
    with page.expect_download() as download:
        page.click("#export-csv")
    table = tmp_path / "run.csv"
    download.value.save_as(table)
    with open(table, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [name for name, _ in CSV_COLUMNS]
    assert len(rows) == len(record["runs"]["speculative"]) + len(record["runs"]["plain"])

    page.reload()
    page.wait_for_selector("#generate")
    assert page.locator("#spec-pane .tok").count() == 0  # a fresh page: nothing on screen
    upload(page, saved)
    assert spec_html(page) == live_html  # the same spans, classes and tooltips as the live run
    assert page.locator("#stats").inner_text() == live_stats
    for plot in ("acceptance-plot", "throughput-plot", "tokens-per-pass-plot", "position-plot", "lengths-plot"):  # plotly draws after the panes
        page.wait_for_selector(f"#{plot} .js-plotly-plot .trace", timeout=30_000)
        assert page.locator(f"#{plot} .js-plotly-plot .trace").count() > 0, plot

    # Replay at 2x: record how many token spans the pane shows over time, from the browser's side.
    page.get_by_label("2x").check()
    page.evaluate("""() => {
      window.counts = [];
      const pane = document.querySelector('#spec-pane');
      new MutationObserver(() => window.counts.push(pane.querySelectorAll('.tok').length))
        .observe(pane, {childList: true, subtree: true});
    }""")
    page.click("#replay")
    page.wait_for_function("document.querySelector('#status').innerText.includes('Replay at 2x')", timeout=30_000)
    steps = len(record["runs"]["speculative"])
    page.wait_for_function(
        f"document.querySelector('#status').innerText.includes('step {steps} of {steps} speculative, plain "
        f"{len(record['runs']['plain'])} of')", timeout=60_000)
    page.wait_for_selector("#stats .badge", timeout=30_000)  # both runs complete again: the badge is back
    counts = page.evaluate("window.counts")
    grown = counts[counts.index(min(counts)):]  # from the replay's first frame on (the pane held the whole run before)
    # The pane grew in steps (how many frames a 1-second run gets depends on the machine's load;
    # tests/test_replay.py checks the timing of every frame against the recorded clock).
    assert grown == sorted(grown) and len(set(grown)) >= 3, counts
    assert grown[-1] == page.locator("#spec-pane .tok").count()
    assert spec_html(page) == live_html
    shown = page.locator("#status").inner_text()
    total = re.search(r"([\d.]+) s of ([\d.]+) s recorded", shown)
    assert total and total.group(1) == total.group(2), shown
    page.close()


def test_lecture_hall_view_in_both_themes(browser, app_url):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(app_url)
    page.wait_for_selector("#generate")
    upload(page, DEMO_RUN)
    page.click("#lecture-view input")
    page.wait_for_function("document.body.classList.contains('lecture')")
    assert not page.locator("#settings").is_visible() and not page.locator("#prompt").is_visible()
    assert page.locator("#replay").is_visible() and page.locator("#replay-speed").is_visible()
    size = page.evaluate("parseFloat(getComputedStyle(document.querySelector('#spec-pane .tokens')).fontSize)")
    assert size >= 22, size  # readable from the back of a room at 720 lines
    stats = page.locator("#stats").bounding_box()
    assert stats["y"] < 720, stats  # the numbers stay on screen below the panes
    # The newest tokens are in view: a full pane is scrolled to its end.
    scrolled = ("(() => { const p = document.querySelector('#spec-pane .tokens'); "
                "return [p.scrollHeight - p.clientHeight, p.scrollHeight - p.scrollTop - p.clientHeight]; })()")
    page.wait_for_function(f"(() => {{ const g = {scrolled}; return g[0] > 0 && g[1] < 24; }})()", timeout=5_000)
    for theme in ("light", "dark"):
        if theme == "dark":
            page.click("#theme input")
            page.wait_for_function("document.body.classList.contains('dark')")
        page.wait_for_timeout(300)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"lecture-{theme}.png"))
    page.get_by_role("tab", name="How it works").click()
    page.wait_for_selector("#how-it-works svg")
    tabs = page.eval_on_selector_all("#tabs [role=tab]", "els => els.map(e => e.innerText.trim())")
    assert tabs == ["Live", "Theory", "How it works"], tabs  # each tab's button once, the selected one too
    # The formulas, typeset (KaTeX runs once the tab is shown, a moment after the click).
    page.wait_for_function("document.querySelectorAll('#how-it-works .katex').length >= 2", timeout=15_000)
    page.screenshot(path=str(ARTIFACTS / "lecture-how-it-works-dark.png"))
    head = page.locator("#head-diagram svg")  # the trained head's diagram, drawn in the text's colour
    head.scroll_into_view_if_needed()
    assert head.get_attribute("aria-labelledby") == "head-title head-desc" and head.bounding_box()["width"] > 400
    head.screenshot(path=str(ARTIFACTS / "how-it-works-head-dark.png"))
    page.close()


def test_the_switches_follow_the_address(browser, app_url):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(app_url + "?lecture=1&__theme=dark")
    page.wait_for_selector("#replay")  # (Generate is folded away in this view)
    page.wait_for_function("document.body.classList.contains('lecture')")
    assert page.locator("#lecture-view input").is_checked()
    assert page.locator("#theme input").is_checked()
    page.close()


def test_a_foreign_file_is_refused_and_the_app_stays_up(browser, app_url, tmp_path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(app_url)
    page.wait_for_selector("#generate")
    bad = tmp_path / "notes.json"
    bad.write_text(json.dumps({"format": "specdec-run", "version": VERSION + 1}))
    page.locator("#export-bar input[type=file]").set_input_files(str(bad))
    page.wait_for_function("document.querySelector('#status').innerText.includes('Not loaded: run record version')",
                           timeout=30_000)
    upload(page, DEMO_RUN)  # and the next file loads
    page.close()
