"""specdec.measure.choose on cost tables recorded on the three CPU kinds (tests/data/costs_*.json; the AMD
EPYC with AVX-512 twice: with w8a8 alone, and measured with both exact kernels): the predicted fastest
exact configuration is chosen, the int4 draft is not chosen where its c is 0.57, and no candidate is
predicted slower than plain steps on its kernel."""

import json
from pathlib import Path

import pytest

from specdec.core.k_policy import predicted_rate
from specdec.core.recorded_acceptance import recorded
from specdec.measure import choose
from specdec.measure.passcost import DraftCost, PassCosts

DATA = Path(__file__).resolve().parent / "data"
KINDS = ("amd_avx2", "amd_avx512", "amd_avx512_exact", "intel_amx")


def recorded_tables(kind: str):
    data = json.loads((DATA / f"costs_{kind}.json").read_text(encoding="utf-8"))
    tables = {k: PassCosts(tuple(t["sizes"]), tuple(t["target_s"]), None, 200, 3) for k, t in data["tables"].items()}
    # Recorded before a drafter's first draft of a step was timed apart: both at the figure recorded.
    return tables, {k: DraftCost(s, s) for k, s in data["drafts"].items()}, {k: DraftCost(s, s) for k, s in data["head_s"].items()}


def measured(kind: str) -> choose.Measured:
    found = choose.candidates(*recorded_tables(kind))
    return choose.Measured("qwen2.5-coder-1.5b/0.5b", kind, "bf16", tuple(found), choose.fastest(found))


@pytest.mark.parametrize("kind", KINDS)
def test_the_predicted_fastest_is_chosen_and_none_is_below_plain(kind):
    tables, drafts, heads = recorded_tables(kind)
    found = choose.candidates(tables, drafts, heads)
    assert len(found) == len(tables) * (1 + len(drafts)) + len(heads)  # plain, each variant, the head, per kernel
    chosen = choose.fastest(found)
    assert chosen.tok_s == max(c.tok_s for c in found)
    for c in found:
        plain = next(p for p in found if p.drafter == "none" and p.target_kernel == c.target_kernel)
        assert c.tok_s >= plain.tok_s  # K = 0 is always weighed
        if c.drafter != "none":  # the cost policy's own prediction at the recorded acceptance
            costs = tables[c.target_kernel]
            assert c.tok_s == pytest.approx(predicted_rate(c.k, c.alpha, c.draft_s, costs, c.first_s))
            assert c.alpha == pytest.approx(recorded(c.drafter).alpha)


def test_on_the_amd_avx512_machine_the_int4_draft_does_not_pay_and_is_not_chosen():
    m = measured("amd_avx512")
    int4 = next(c for c in m.candidates if c.draft_variant == "int4")
    assert int4.c == pytest.approx(0.57, abs=0.01) and int4.k == 0  # drafting with it would cost more than it saves
    assert int4.why.startswith("drafting would cost more than it saves here: c = 0.57")
    assert m.chosen.draft_variant != "int4" and m.chosen.k > 0 and m.chosen.tok_s > m.plain_here.tok_s
    assert m.defaults().draft_variant != "int4"


def test_on_the_amd_avx512_machine_with_both_exact_kernels_the_head_on_w4a8_is_chosen():
    """Measured there by `python -m specdec defaults`: w4a8's step is 0.66 of w8a8's, so a draft model
    pass that pays on w8a8 (K = 1) costs too much of a w4a8 step, while the head's step (c 0.08) pays
    on either kernel; and plain steps on w4a8 already beat every configuration on w8a8."""
    m = measured("amd_avx512_exact")
    assert (m.chosen.target_kernel, m.chosen.drafter) == ("w4a8", "head") and m.chosen.k > 0
    assert m.defaults().drafter == "auto_both" and m.defaults().target_kernel == "w4a8"
    models = {(c.target_kernel, c.draft_variant): c for c in m.candidates if c.drafter == "model"}
    assert all(c.k == 0 for (kernel, _), c in models.items() if kernel == "w4a8")
    assert all(c.k > 0 for (kernel, _), c in models.items() if kernel == "w8a8")
    fastest_w8a8 = max(c.tok_s for c in m.candidates if c.target_kernel == "w8a8")
    assert m.chosen.tok_s > m.plain_here.tok_s > fastest_w8a8  # plain steps on w4a8 beat anything on w8a8 there


def test_on_the_amx_machine_the_cheap_int4_draft_is_chosen():
    """The same candidates, other costs: there the int4 draft costs 0.19 of a step and wins."""
    m = measured("intel_amx")
    assert (m.chosen.target_kernel, m.chosen.drafter, m.chosen.draft_variant) == ("w8a8", "model", "int4")
    assert m.defaults().drafter == "auto" and m.defaults().k_policy == "cost"


def test_on_the_avx2_machine_no_drafter_pays_so_plain_steps_are_chosen():
    m = measured("amd_avx2")
    assert m.chosen.drafter == "none" and m.chosen.k == 0
    assert "plain steps (drafting would cost more than it saves here: c = " in m.line
    assert m.line.startswith("measured on this machine: target dense (449 ms a token)")
    assert m.defaults().target_kernel == "dense" and m.defaults().k_policy == "cost"  # lookup may still draft


def test_a_measurement_survives_json_and_a_damaged_one_is_not_trusted():
    m = measured("amd_avx512")
    back = choose.from_json(json.loads(json.dumps(m.as_json())))
    assert back.chosen == m.chosen and back.candidates == m.candidates and back.line == m.line
    data = m.as_json()
    data["candidates"][0]["tok_s"] = -1.0
    assert choose.from_json(data) is None
    assert choose.from_json({**m.as_json(), "version": 0}) is None
    assert choose.from_json({"format": choose.FORMAT, "version": choose.VERSION}) is None


def test_where_the_head_is_chosen_the_draft_model_stands_by_if_it_was_measured():
    """The head chosen: the run's drafter is auto_both (the cost K policy drafts each step with the
    head or the draft model, whichever it prices faster); auto_head where no draft model was measured."""
    tables, drafts, heads = recorded_tables("intel_amx")
    head_wins = {k: DraftCost(c.step_s / 4, c.step_s / 4) for k, c in heads.items()}  # a head cheap enough to win
    found = choose.candidates(tables, drafts, head_wins)
    m = choose.Measured("qwen2.5-coder-1.5b/0.5b", "intel_amx", "bf16", tuple(found), choose.fastest(found))
    assert m.chosen.drafter == "head" and m.defaults().drafter == "auto_both" and m.defaults().draft_variant in drafts
    assert f"the trained head, K = {m.chosen.k}" in m.line and f"(draft {m.variant} where it is priced faster)" in m.line
    alone = choose.candidates(tables, {}, head_wins)
    m = choose.Measured("qwen2.5-coder-1.5b/0.5b", "intel_amx", "bf16", tuple(alone), choose.fastest(alone))
    assert m.chosen.drafter == "head" and m.defaults().drafter == "auto_head" and "where it is priced faster" not in m.line
