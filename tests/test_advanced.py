"""The Advanced accordion's label: every folded setting in one line (app/advanced.py)."""

from app.advanced import AdvancedValues, summary


def test_the_defaults_read_as_one_line():
    line = summary(AdvancedValues())
    assert line == ("Advanced: draft model \u00b7 draft dense \u00b7 target dense \u00b7 eager runner \u00b7 fixed K \u00b7 top-p 1 \u00b7 "
                    "top-k off \u00b7 seed 0 \u00b7 this project's engine \u00b7 no lossy lane \u00b7 rejected shown")
    assert "\n" not in line


def test_every_value_shows_in_the_line():
    line = summary(AdvancedValues(drafter="lookup", draft_variant="int4-v16k", target_kernel="q4k", runner="static", cost_k=True,
                                  top_p=0.9, top_k=40, seed=7, lossy=True, show_rejected=False))
    for part in ("prompt lookup", "draft int4-v16k", "target q4k", "static runner", "K from pass costs", "top-p 0.9", "top-k 40", "seed 7",
                 "lossy lane on", "rejected hidden"):
        assert part in line, part


def test_both_k_policies_ticked_are_named_as_a_choice_to_make():
    """A run with both is refused (app.settings.read_config): the summary says so before it starts."""
    assert "adaptive K and K from pass costs both ticked: choose one" in summary(AdvancedValues(adaptive=True, cost_k=True))
    assert "adaptive K" in summary(AdvancedValues(adaptive=True)) and "choose one" not in summary(AdvancedValues(adaptive=True))


def test_a_remote_engine_shows_its_urls():
    line = summary(AdvancedValues(engine="llama.cpp", spec_url=" http://127.0.0.1:8080 ", plain_url="http://127.0.0.1:8081"))
    assert "a llama.cpp server at http://127.0.0.1:8080, plain at http://127.0.0.1:8081" in line
    assert "a vLLM server (no URL yet), no plain server" in summary(AdvancedValues(engine="vllm", spec_url=None, plain_url=None))


def test_cleared_number_boxes_are_named_not_fatal():
    line = summary(AdvancedValues(top_k=None, seed=None, top_p=None))
    assert "top-k (empty)" in line and "seed (empty)" in line and "top-p (empty)" in line
