"""The app in a real browser: headless Debian chromium driven by Playwright, on tiny-random.

The app runs in $SPECDEC_DTYPE (fp32 when unset), never in the CPU's automatic choice, so the
result does not depend on which CPU runs the suite; `make test` runs this module in fp32 and in bf16."""

import os
import re

import pytest

from tests.support.browser import ARTIFACTS, CHROMIUM, DTYPE, open_advanced, set_max_new_tokens

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (make test installs it)"),
    pytest.mark.precision,
]


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
        tie = re.search(r"differs at token \d+: spec .* vs plain .*(?:, target|; the \w+ kernel's) top-2 logit margin \d+\.\d{4}: a numerical tie", badge)
        assert "identical to plain decoding" in badge or tie, badge
    assert f"({DTYPE})" in page.locator("#status details p").text_content()  # the override reached the app (behind the line)
    assert "per-token acceptance" in page.locator("#stats").inner_text() and "drafts accepted" in page.locator("#stats").inner_text()
    for plot in ("acceptance-plot", "throughput-plot", "tokens-per-pass-plot", "position-plot", "lengths-plot"):
        assert page.locator(f"#{plot} .js-plotly-plot .trace").count() > 0, plot
    assert "Acceptance by draft position" in page.locator("#positions-caption").inner_text()
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
    open_advanced(page)
    box = page.locator("#draft-variant input")
    box.click()
    box.fill("int8")
    page.get_by_role("option", name="int8", exact=True).click()
    page.locator("#plain-int4 input").check()
    page.locator("#prompt textarea").fill("for i in range(10):")
    set_max_new_tokens(page, 24)
    page.click("#generate")
    page.wait_for_selector("#lossy-note .badge", timeout=120_000)  # written once the lossy lane has finished
    assert ", draft int8" in page.locator("#status").inner_text()
    note = page.locator("#lossy-note").inner_text()
    assert "int4 target:" in note and ("departs from the exact target at token" in note or "the same 24 tokens" in note), note
    assert page.locator("#lossy-pane .tok-plain").count() > 0
    page.locator("#plain-int4 input").uncheck()


STEP_PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
SPAN_IN_PAGE = "Array.from(document.querySelectorAll('#spec-pane .tok')).map(t => [t.className, t.dataset.step, t.textContent])"


def expected_run(max_new_tokens: int, temperature: float, draft_variant: str):
    """The same run in this process (same pair, dtype, settings and seed): what stepping must show."""
    from specdec.core.config import GenerationConfig
    from specdec.engines.ours import OurSource
    from specdec.models.pair import load_pair

    pair = load_pair("tiny-random", device="cpu", dtype=DTYPE)
    config = GenerationConfig(max_new_tokens=max_new_tokens, k=5, temperature=temperature, draft_variant=draft_variant)
    return list(OurSource(pair, config).run(STEP_PROMPT))


def panel_verdicts(page, step: int) -> list[str]:
    page.wait_for_selector(f'#step-panel .step-panel[data-step="{step}"]', timeout=60_000)
    return page.eval_on_selector_all(f'#step-panel .step-panel[data-step="{step}"] tr[data-verdict]',
                                     "rows => rows.map(r => r.dataset.verdict)")


def event_verdicts(event) -> list[str]:
    n = event.accepted
    return ["accepted"] * n + (["rejected"] + ["discarded"] * (len(event.drafted) - n - 1) if n < len(event.drafted) else [])


def test_step_through_explains_each_step_and_clicking_a_token_opens_it(page):
    from app.render import render_tokens

    events = expected_run(48, 0.8, page.locator("#draft-variant input").input_value())  # as an earlier test left it
    page.locator("#prompt textarea").fill(STEP_PROMPT)
    temperature = page.locator("#temperature input[type=number]")
    temperature.fill("0.8")
    temperature.press("Enter")
    set_max_new_tokens(page, 48)
    # Step three times, and on until a step has rejected a draft (its panel shows the three distributions).
    step = 0
    while step < 3 or not any(e.kind == "correction" for e in events[:step]):
        assert step < min(len(events), 12), "no rejection in the first steps"
        page.click("#step")
        assert panel_verdicts(page, step) == event_verdicts(events[step]), step
        if events[step].drafted and not events[step].greedy:  # sampling: u against the ratio, every checked row
            evidence = page.locator('#step-panel tr[data-verdict="accepted"] td:nth-child(6)').all_inner_texts()
            assert all(re.match(r"u = 0\.\d{3} < \d\.\d{3}", t) for t in evidence), evidence
        step += 1
    shown = page.evaluate(SPAN_IN_PAGE)
    assert {s[1] for s in shown} == {str(i) for i in range(step)}  # the pane holds exactly the steps taken

    # Open a step by clicking one of its tokens: the rejection, with p_target, p_draft and the residual.
    rejected = next(e for e in events[:step] if e.kind == "correction")
    page.locator(f'#spec-pane .tok[data-step="{rejected.step}"]').first.click()  # a token that decodes to "" has no span
    assert panel_verdicts(page, rejected.step) == event_verdicts(rejected)
    table = page.locator("#step-panel .dist-table")
    assert table.locator("th").all_inner_texts()[:4] == ["token", "p_target", "p_draft", "residual"]
    assert table.locator("tr.cand.drawn").count() == 1 and "drawn" in table.locator("tr.cand.drawn").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#step-panel").screenshot(path=str(ARTIFACTS / f"step-panel-sampling-tiny-random-{DTYPE}.png"))

    # Run to end: the finished pane is exactly an uninterrupted run's.
    page.click("#run-to-end")
    page.wait_for_selector("#stats .badge", timeout=120_000)
    want = re.findall(r'<span class="tok (tok-\w+)" data-step="(\d+)"', render_tokens(events))
    assert [(s[0], s[1]) for s in page.evaluate(SPAN_IN_PAGE)] == [("tok " + c, s) for c, s in want]
    page.wait_for_selector("#predictions .pred-table", timeout=30_000)
    assert "from passes" in page.locator("#predictions").inner_text()
    page.screenshot(path=str(ARTIFACTS / f"stepped-run-tiny-random-{DTYPE}.png"), full_page=True)


def test_theory_tab_measures_pass_costs_and_sweeps_k(page):
    page.get_by_role("tab", name="Theory").click()
    page.click("#measure-passes")
    page.wait_for_function("document.querySelector('#theory-status').innerText.includes('measured')", timeout=60_000)
    assert "decode steps" in page.locator("#passcost-caption").inner_text()
    # The sweep uses the Live tab's settings (48 tokens, sampled, from the test before).
    page.click("#sweep")
    page.wait_for_function("document.querySelector('#theory-status').innerText.includes('K=8')", timeout=180_000)
    assert page.locator("#k-curve-plot .js-plotly-plot .trace").count() >= 4  # two curves, best K, the measured points
    assert "measured by Sweep K" in page.locator("#k-caption").inner_text()
    page.screenshot(path=str(ARTIFACTS / f"theory-tiny-random-{DTYPE}.png"), full_page=True)
    page.get_by_role("tab", name="Live").click()


def test_each_drafter_gets_its_own_line_and_bars(page):
    """Drafter auto on a prompt that repeats itself: prompt lookup drafts the first step (the last
    line matches an earlier one), the draft model the steps it finds nothing; the per-drafter charts
    draw one trace each. Last in the module: it leaves the drafter on auto."""
    page.locator("#prompt textarea").fill("def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):")
    open_advanced(page)
    page.locator("#drafter").get_by_text("auto").click()
    set_max_new_tokens(page, 48)
    page.click("#generate")
    page.wait_for_selector("#stats .badge", timeout=120_000)
    for plot in ("position-plot", "lengths-plot"):
        page.wait_for_function(f"document.querySelectorAll('#{plot} .js-plotly-plot .trace').length == 2", timeout=30_000)
        legend = page.locator(f"#{plot} .legend").text_content()  # an SVG group: no inner text
        assert "prompt lookup" in legend and "draft model" in legend, legend
    page.locator("#position-plot").screenshot(path=str(ARTIFACTS / f"browser-positions-{DTYPE}.png"))
