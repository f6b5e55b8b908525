"""The page's first screen in a real browser: at 1280x800, before any scrolling, a visitor sees the
prompt, Generate and both token panes side by side, in the light and the dark theme; the settings
not about what is shown wait in the closed Advanced accordion, whose label follows their values.

Screenshots of a tiny-random run (artifacts/first-screen-light.png, -dark.png) are what
docs/first-screen-*.png are made from (there with the embedded pair)."""

import os
import re

import pytest

from tests.support.browser import ARTIFACTS, CHROMIUM, open_advanced, set_max_new_tokens

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (make test installs it)")

WIDTH, HEIGHT = 1280, 800
PANES_ABOVE = 700  # both token panes start above this y at 1280x800: the race shows without scrolling
FIRST_SCREEN = ("#prompt", "#generate", "#spec-pane", "#plain-pane")


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(app_url)
        page.wait_for_selector("#generate")
        yield page
        browser.close()


def boxes_in_view(page) -> dict:
    """Each first-screen element's box, as the visitor sees it without scrolling."""
    page.evaluate("window.scrollTo(0, 0)")
    return {selector: page.locator(selector).bounding_box() for selector in FIRST_SCREEN}


def test_prompt_generate_and_both_panes_are_on_the_first_screen_in_both_themes(page):
    from playwright.sync_api import expect

    page.get_by_text("code: python-function").click()
    expect(page.locator("#prompt textarea")).to_have_value(re.compile("merge_intervals"), timeout=30_000)
    set_max_new_tokens(page, 48)
    page.click("#generate")
    page.wait_for_selector("#stats .badge", timeout=120_000)  # both runs done: the panes hold coloured tokens
    assert page.locator("#spec-pane .tok-accepted").count() > 0
    status = page.locator("#status details.status-line > summary")  # the run's line: one line, its details folded
    assert status.count() == 1 and page.locator("#status details").first.get_attribute("open") is None
    font = page.evaluate("parseFloat(getComputedStyle(document.querySelector('#status summary')).fontSize)")
    assert status.bounding_box()["height"] <= 2.2 * font, status.inner_text()
    assert status.inner_text().startswith("tiny-random: target dense") and not page.locator("#status details p").is_visible()
    page.mouse.move(WIDTH // 2, HEIGHT - 1)  # off Generate: the screenshots show it unhovered
    for theme in ("light", "dark"):
        if theme == "dark":
            page.click("#theme input")
            page.wait_for_function("document.body.classList.contains('dark')")
        boxes = boxes_in_view(page)
        for selector, box in boxes.items():
            assert box is not None, f"{selector} is not shown ({theme})"
            assert 0 <= box["y"] < HEIGHT and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, (theme, selector, box)
        spec, plain = boxes["#spec-pane"], boxes["#plain-pane"]
        assert spec["y"] == plain["y"] and spec["x"] + spec["width"] <= plain["x"], (spec, plain)  # side by side
        above = {s: page.locator(s).bounding_box() for s in ("#controls", "#settings", "#advanced", "#status", "#defaults-line")}
        assert spec["y"] < PANES_ABOVE and plain["y"] < PANES_ABOVE, (theme, spec["y"], above)  # where the height goes
        ARTIFACTS.mkdir(exist_ok=True)
        page.wait_for_timeout(300)  # the theme's colours settle
        page.screenshot(path=str(ARTIFACTS / f"first-screen-{theme}.png"))
    page.click("#theme input")  # back to light for the next test
    page.wait_for_function("!document.body.classList.contains('dark')")


def test_the_advanced_settings_are_folded_and_their_label_follows_them(page):
    label = page.locator("#advanced .label-wrap").first
    assert not page.locator("#drafter").is_visible()  # closed when the page opens
    assert "seed 0" in label.inner_text() and "no lossy lane" in label.inner_text()
    open_advanced(page)
    seed = page.locator("#seed input")
    seed.fill("7")
    seed.press("Enter")
    page.locator("#plain-int4 input").check()
    page.wait_for_function("document.querySelector('#advanced .label-wrap').innerText.includes('seed 7')", timeout=10_000)
    page.wait_for_function("document.querySelector('#advanced .label-wrap').innerText.includes('lossy lane on')",
                           timeout=10_000)
    page.locator("#plain-int4 input").uncheck()
    seed.fill("0")
    seed.press("Enter")
    page.wait_for_function("document.querySelector('#advanced .label-wrap').innerText.includes('seed 0')", timeout=10_000)


def test_the_defaults_line_is_one_line_with_its_figures_behind_a_disclosure(page):
    page.evaluate("window.scrollTo(0, 0)")
    summary = page.locator("#defaults-line details.defaults-line > summary")
    assert summary.count() == 1 and page.locator("#defaults-line details").first.get_attribute("open") is None  # closed
    font = page.evaluate("parseFloat(getComputedStyle(document.querySelector('#defaults-line summary')).fontSize)")
    assert summary.bounding_box()["height"] <= 2.2 * font  # one line (two would be over 2.4 font sizes), however long the text
    text = summary.inner_text()
    assert text.startswith(("Measured on this machine: ", "Not measured here: ")) and text.endswith(" draft"), text
    summary.click()
    page.wait_for_function("document.querySelector('#defaults-line details').open")
    assert page.locator("#defaults-line details p").first.is_visible()  # the figures behind it
    summary.click()
