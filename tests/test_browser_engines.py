"""The Engine choice in a real browser: the page reads a llama.cpp server (a stand-in streaming
llama-server's chunk format, with token ids of the app's tiny-random vocabulary) and colours its
steps: accepted drafts, the target's own tokens, and the rejected drafts it only counted ("×N").
tests/test_llamacpp.py runs the real llama-server; this checks what a person sees of such a run."""

import os

import pytest

from tests.support.browser import ARTIFACTS, CHROMIUM, open_advanced, set_max_new_tokens

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (make test installs it)")


def test_the_page_colours_a_llamacpp_run(app_url, servers):
    from playwright.sync_api import expect, sync_playwright

    spec_url, plain_url = servers
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1400, "height": 1500})
        page.goto(app_url)
        page.wait_for_selector("#generate")
        open_advanced(page)
        page.locator("#engine").get_by_text("a llama.cpp server").click()
        expect(page.locator("#spec-url")).to_be_visible()
        page.locator("#spec-url textarea, #spec-url input").first.fill(spec_url)
        page.locator("#plain-url textarea, #plain-url input").first.fill(plain_url)
        page.locator("#prompt textarea").fill("def add(a, b):")
        set_max_new_tokens(page, 10)
        page.click("#generate")
        page.wait_for_selector("#stats .badge", timeout=120_000)  # both lanes done
        spec = page.locator("#spec-pane")
        assert spec.locator(".tok-accepted").count() == 2 + 4  # the accepted drafts of steps 1 and 2
        chips = [spec.locator(".tok-unseen").nth(i).inner_text() for i in range(spec.locator(".tok-unseen").count())]
        assert chips == ["\u00d72", "\u00d74"]  # the rejected drafts llama.cpp counted but did not send
        assert spec.locator(".tok-correction").count() == 2 and spec.locator(".tok-bonus").count() == 1
        assert page.locator("#plain-pane .tok-plain").count() == 5
        assert "llama.cpp server at " + spec_url in page.locator("#status").inner_text()
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#status").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "engine-llamacpp.png"), full_page=False)
        browser.close()
