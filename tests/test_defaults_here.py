"""specdec.serving.defaults_here and `python -m specdec defaults` on tiny-random: every candidate the
device offers is measured through the cost tables, the choice is the predicted fastest, it is kept
so a second start reads it, and a missing or damaged table or choice file is measured again."""

import json
from dataclasses import replace

import pytest

from specdec.kernels import device_offer
from specdec.kernels.device_offer import Offered
from specdec.measure import choose, cost_table
from specdec.measure.passcost import DraftCost
from specdec.serving import defaults_here

KERNELS, VARIANTS = ("dense", "int8"), ("dense", "int4")  # a small offer: fast, and no C++ build in a fresh cache


@pytest.fixture
def here(monkeypatch, tmp_path):
    """No cost table or choice kept yet (the kernels' own builds stay in the usual cache: no C++ build per
    test), and a device that offers KERNELS and VARIANTS (what device_offer says is what is measured)."""
    monkeypatch.setattr(cost_table, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(defaults_here, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(defaults_here, "recorded_pair", lambda: "tiny-random")  # measured as if its acceptance were recorded
    monkeypatch.setattr(device_offer, "target_kernels", lambda device: Offered(KERNELS))
    monkeypatch.setattr(device_offer, "draft_variants", lambda device: Offered(VARIANTS))
    a_new_process(monkeypatch)
    return tmp_path


def a_new_process(monkeypatch):
    """What this process kept in memory forgotten: the files are all a new start has."""
    for name in ("_tables", "_drafts", "_feeds", "_head_steps"):
        monkeypatch.setattr(cost_table, name, {})


def test_every_offered_candidate_is_measured_and_the_fastest_is_chosen_and_kept(here, tiny_pair):
    built_before = (set(tiny_pair.built.kernels), set(tiny_pair.built.drafts))
    measured = defaults_here.ensure(tiny_pair)
    found = {(c.target_kernel, c.drafter, c.draft_variant) for c in measured.candidates}
    expected = {(k, "none", "") for k in KERNELS} | {(k, "model", v) for k in KERNELS for v in VARIANTS}
    assert found == expected
    assert measured.chosen.tok_s == max(c.tok_s for c in measured.candidates)
    assert "head" in measured.skipped  # tiny-random has no trained head: said, not guessed
    assert defaults_here.read_choice(tiny_pair.name, tiny_pair.device).chosen == measured.chosen
    start = defaults_here.start_defaults(tiny_pair.name, tiny_pair.device)
    assert (start.target_kernel, start.k_policy) == (measured.chosen.target_kernel, "cost")
    assert start.reason.startswith("measured on this machine: ")
    # nothing is left built but what the start runs on (here int8, measured after the recorded kernel: dropped)
    assert set(tiny_pair.built.kernels) - built_before[0] <= {start.target_kernel}
    assert set(tiny_pair.built.drafts) - built_before[1] <= {start.draft_variant}
    # the table the start's runs read is the one the choice was predicted from: the first run measures nothing
    kept = cost_table.read(cost_table.table_path(tiny_pair.name, start.target_kernel, start.draft_variant, tiny_pair.dtype_name,
                                                 tiny_pair.device))
    chosen_kernel = next(c for c in measured.candidates if c.drafter == "none" and c.target_kernel == start.target_kernel)
    assert kept.decode_step_s == pytest.approx(chosen_kernel.decode_step_s)
    assert kept.draft_s == pytest.approx(next(c.draft_s for c in measured.candidates if c.draft_variant == start.draft_variant))
    assert kept.draft_feed_s == cost_table.draft_feeds(tiny_pair, start.draft_variant)  # the variant's own catch-ups
    # the kernels' tables time the target alone: the draft is timed once per variant, not once per kernel
    target_only = cost_table.read(cost_table.table_path(tiny_pair.name, start.target_kernel, cost_table.NO_DRAFT,
                                                        tiny_pair.dtype_name, tiny_pair.device))
    assert target_only.draft_s is None and target_only.target_s == kept.target_s


def test_the_kept_table_carries_the_choices_figures_even_where_a_table_was_measured_there(here, tiny_pair):
    """A run had measured the (kernel, dense draft) table, with its own timing of both: the choice's
    figures (the kernel's target passes, the variant's draft pass and catch-ups) are written in
    its place, the heads timed against it kept."""
    measured = defaults_here.ensure(tiny_pair)
    kernel = measured.chosen.target_kernel
    dense_draft = next(c for c in measured.candidates if c.target_kernel == kernel and c.draft_variant == "dense")
    as_if_dense = replace(measured, chosen=dense_draft)
    path = cost_table.table_path(tiny_pair.name, kernel, "dense", tiny_pair.dtype_name, tiny_pair.device, choose.RUNNER)
    run_table = cost_table.measure(tiny_pair, kernel=kernel, draft_variant="dense", runner=choose.RUNNER)
    cost_table.add_head_step(path, "a-head", DraftCost(0.002, 0.001))
    target = replace(run_table, target_s=tuple(t * 1.25 for t in run_table.target_s), draft_s=None, draft_feed_s=None)
    defaults_here.keep_chosen_table(tiny_pair, as_if_dense, {kernel: target}, {"dense": DraftCost(dense_draft.first_s, dense_draft.draft_s)})
    kept = cost_table.read(path)
    draft_s, feeds = cost_table.draft_cost(tiny_pair, "dense", choose.RUNNER).step_s, cost_table.draft_feeds(tiny_pair, "dense", choose.RUNNER)
    assert (kept.target_s, kept.draft_s, kept.draft_feed_s) == (target.target_s, draft_s, feeds)
    assert cost_table.read_head_steps(path) == {"a-head": DraftCost(0.002, 0.001)}
    assert cost_table.measure(tiny_pair, kernel=kernel, draft_variant="dense", runner=choose.RUNNER).draft_s == draft_s


def test_a_second_start_reads_the_choice_and_a_new_kernel_is_measured(here, tiny_pair, monkeypatch):
    first, measure = defaults_here.ensure(tiny_pair), cost_table.measure
    together = cost_table.measure_together
    for name in ("measure", "measure_together"):
        monkeypatch.setattr(cost_table, name, lambda *a, **k: pytest.fail("a kept choice is not measured again"))
    assert defaults_here.ensure(tiny_pair).chosen == first.chosen
    monkeypatch.setattr(cost_table, "measure", measure)
    monkeypatch.setattr(cost_table, "measure_together", together)
    monkeypatch.setattr(device_offer, "target_kernels", lambda device: Offered((*KERNELS, "q4k")))  # a kernel offered since
    assert "q4k" in {c.target_kernel for c in defaults_here.ensure(tiny_pair).candidates}


def test_a_missing_or_damaged_table_or_choice_is_measured_again(here, tiny_pair, monkeypatch):
    defaults_here.ensure(tiny_pair)
    table = cost_table.table_path(tiny_pair.name, "int8", cost_table.NO_DRAFT, tiny_pair.dtype_name, tiny_pair.device)
    draft = cost_table.draft_path(tiny_pair.name, "int4", tiny_pair.dtype_name, tiny_pair.device)
    choice = defaults_here.choice_path(tiny_pair.name, tiny_pair.device)
    table.write_text('{"format": "specdec-costs", "version": 1, "costs": {"sizes": [1], "target_s": [-1]}}')
    draft.unlink()
    choice.write_text("{not json")
    a_new_process(monkeypatch)
    assert defaults_here.read_choice(tiny_pair.name, tiny_pair.device) is None  # not trusted
    measured = defaults_here.ensure(tiny_pair)
    assert cost_table.read(table) is not None and cost_table.read_draft(draft) is not None  # both measured again
    assert defaults_here.read_choice(tiny_pair.name, tiny_pair.device).chosen == measured.chosen


def test_the_recorded_entry_when_chosen_stays_built_for_the_start(here, tiny_pair, monkeypatch):
    """The recorded kernel and variant are kept built through the measurement: where they are chosen,
    the start does not build them a second time; anything else measured is dropped."""
    from specdec.kernels import machine_defaults

    recorded = replace(machine_defaults.defaults_for(tiny_pair.device, tiny_pair.name), target_kernel="int8", draft_variant="int4")
    monkeypatch.setattr(defaults_here, "defaults_for", lambda device, name: recorded)
    monkeypatch.setattr(device_offer, "target_kernels", lambda device: Offered(("int8",)))
    monkeypatch.setattr(device_offer, "draft_variants", lambda device: Offered(("int4", "dense")))
    tiny_pair.built.kernels.pop("int8", None)  # built by the measurement itself
    tiny_pair.built.drafts.pop("int4", None)
    drafts_before = set(tiny_pair.built.drafts)
    measured = defaults_here.measure_here(tiny_pair)
    assert measured.chosen.target_kernel == "int8" and "int8" in tiny_pair.built.kernels
    assert set(tiny_pair.built.drafts) - drafts_before <= {measured.variant}


def test_the_budget_leaves_out_what_it_cannot_reach_and_says_so(here, tiny_pair, monkeypatch):
    # the recorded kernel with the library's kernels (timed together), their heads, the draft variants, then the slow kernels
    assert defaults_here.plan(tiny_pair) == [("kernel", ("dense",)), ("head", ("dense",)), ("draft", ("dense",)), ("draft", ("int4",)),
                                             ("kernel", ("int8",)), ("head", ("int8",))]
    with monkeypatch.context() as patched:
        patched.setattr(device_offer, "target_kernels", lambda device: Offered(("dense", "int8", "w4a8")))
        assert defaults_here.plan(tiny_pair)[:3] == [("kernel", ("dense", "w4a8")), ("head", ("dense",)), ("head", ("w4a8",))]
    monkeypatch.setattr(device_offer, "draft_variants", lambda device: Offered(("dense", "int4", "int4-v32k")))
    drafts = [name for what, (name,) in defaults_here.plan(tiny_pair) if what == "draft"]
    assert drafts == ["dense", "int4-v32k", "int4"]  # the recorded variant, then the likeliest cheap ones
    monkeypatch.setattr(device_offer, "draft_variants", lambda device: Offered(VARIANTS))
    measured = defaults_here.measure_here(tiny_pair, budget_s=0.0)
    assert {c.target_kernel for c in measured.candidates} == {"dense"}  # the first kernel is always timed
    assert measured.skipped["kernel int8"] == measured.skipped["draft int4"] == defaults_here.BUDGET
    assert measured.chosen.drafter == "none" and "no drafter was measured yet" in measured.line
    assert measured.defaults().draft_variant == "dense"  # the recorded table's variant for tiny-random
    assert not defaults_here.complete(measured, tiny_pair.device)  # the next start measures the rest


def test_the_librarys_kernels_are_timed_together_and_one_that_cannot_be_built_is_left_out_alone(here, tiny_pair, monkeypatch):
    """The recorded kernel and the other kernels of this project's library are timed in one
    measurement, round by round (a slow spell of the machine falls on all of them alike); a kernel
    that cannot be built here is named with its reason, and the others are still measured."""
    from specdec.measure import passcost

    monkeypatch.setattr(defaults_here, "native_kernel", lambda name: "w8a8" if name in ("int8", "q4k") else None)  # as if in the library
    monkeypatch.setattr(device_offer, "target_kernels", lambda device: Offered(("dense", "int8", "q4k")))
    built = defaults_here.kernel_target

    def kernel_target(pair, name):
        if name == "q4k":
            raise ValueError("q4k: no compiler here")
        return built(pair, name)

    monkeypatch.setattr(defaults_here, "kernel_target", kernel_target)
    timed = []

    def recording(targets, *args, **kwargs):
        timed.append(sorted(targets))
        return passcost.measure_targets(targets, *args, **kwargs)

    monkeypatch.setattr(cost_table, "measure_targets", recording)
    measured = defaults_here.measure_here(tiny_pair)
    assert timed == [["dense", "int8"]]  # one measurement of both, not one after the other
    assert {c.target_kernel for c in measured.candidates} == {"dense", "int8"}
    assert measured.skipped["kernel q4k"] == "q4k: no compiler here"
    a_new_process(monkeypatch)
    again = defaults_here.measure_here(tiny_pair)  # kept tables are read, not timed again
    assert timed == [["dense", "int8"]] and {c.decode_step_s for c in again.candidates} == {c.decode_step_s for c in measured.candidates}


def test_off_a_cpu_nothing_is_measured_and_the_recorded_entry_stands():
    import torch

    from specdec.kernels.machine_defaults import defaults_for

    gpu = torch.device("cuda")
    assert defaults_here.measurable("tiny-random", gpu) and defaults_here.read_choice("tiny-random", gpu) is None
    assert defaults_here.start_defaults("tiny-random", gpu) == defaults_for(gpu, "tiny-random")


def test_a_pair_without_recorded_acceptance_is_not_measured(tiny_pair, capsys):
    from specdec.__main__ import main

    why = defaults_here.measurable("tiny-random", tiny_pair.device)
    assert why == "not measured for tiny-random: its drafters' acceptance is not recorded (only qwen2.5-coder-1.5b/0.5b's is)"
    assert defaults_here.ensure(tiny_pair) is None
    assert main(["defaults", "--pair", "tiny-random", "--dtype", "fp32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measured"] is False and out["why"] == why and out["candidates"] == []


def test_defaults_json_lists_every_candidate_with_its_costs(here, capsys):
    from specdec.__main__ import main

    assert main(["defaults", "--pair", "tiny-random", "--dtype", "fp32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["candidates"]) == len(KERNELS) * (1 + len(VARIANTS))
    for c in out["candidates"]:
        assert c["decode_step_s"] > 0 and c["tok_s"] > 0 and c["check_s"] > 0
        assert (c["draft_s"] is None) == (c["drafter"] == "none") and (c["alpha"] is None) == (c["drafter"] == "none")
    assert out["chosen"]["tok_s"] == max(c["tok_s"] for c in out["candidates"])
    assert out["start"]["target_kernel"] == out["chosen"]["target_kernel"] and out["start"]["k_policy"] == "cost"
    assert main(["defaults", "--pair", "tiny-random", "--dtype", "fp32"]) == 0
    text = capsys.readouterr().out
    assert "**chosen**" in text and "measured on this machine: " in text and "not measured: head" in text


def test_the_pages_line_is_one_summary_with_the_figures_behind_it(here, tiny_pair):
    from app import advanced

    before = advanced.defaults_line(tiny_pair.name, tiny_pair.device)
    assert "not measured here" in before and "<summary title=" in before and "Not measured here: " in before
    measured = defaults_here.ensure(tiny_pair)
    line = advanced.defaults_line(tiny_pair.name, tiny_pair.device)
    summary = line[line.index('">', line.index("<summary")) + 2 : line.index("</summary>")]
    assert summary == f"Measured on this machine: {measured.chosen.target_kernel}, {measured.variant} draft"
    assert "<" not in summary and "\n" not in summary  # one line of text
    figures = line[line.index("</summary>") :]
    assert figures.count("<tr") == 1 + len(measured.candidates) and 'class="chosen"' in figures
    assert advanced.defaults(tiny_pair.name, tiny_pair.device).target_kernel == measured.chosen.target_kernel


def offer_head(pair, path, at_position_1, seed, monkeypatch) -> str:
    """A small head for `pair` saved at `path` with `at_position_1` as its held-out figure, and
    offered as the pair's trained head; returns its tensors' digest."""
    from specdec.kernels import head_offer
    from specdec.kernels.head_store import save_head
    from specdec.train.recipe import Recipe
    from specdec.train.trainer import new_head

    figures = {"acceptance_by_position": [at_position_1], "read_text": {"acceptance": [at_position_1 + 0.1]}}
    save_head(path, new_head(pair.target, Recipe(intermediate=32), seed), head_offer.target_key(pair), {"intermediate": 32}, figures)
    monkeypatch.setattr(head_offer, "trained_path", lambda name: path)
    return head_offer.offered_head(pair).stored.digest


def test_a_kernels_head_is_timed_even_past_the_budget(here, tiny_pair, monkeypatch):
    """Where the kernels take the whole budget (a new machine builds them from scratch), the head is
    still timed: it takes milliseconds, and without it the start could only run plain steps."""
    offer_head(tiny_pair, here / "head.safetensors", 0.62, 0, monkeypatch)
    measured = defaults_here.measure_here(tiny_pair, budget_s=0.0)
    assert [(c.target_kernel, c.drafter) for c in measured.candidates] == [("dense", "none"), ("dense", "head")]
    assert measured.skipped["draft dense"] == measured.skipped["kernel int8"] == defaults_here.BUDGET
    assert "head" not in measured.skipped and not defaults_here.complete(measured, tiny_pair.device, measured.head)


def test_the_head_is_predicted_at_its_files_own_figure_and_a_new_head_file_is_measured_again(here, tiny_pair, monkeypatch):
    def offer(path, at_position_1, seed):
        return offer_head(tiny_pair, path, at_position_1, seed, monkeypatch)

    first = offer(here / "first.safetensors", 0.62, seed=0)
    measured = defaults_here.ensure(tiny_pair)
    heads = [c for c in measured.candidates if c.drafter == "head"]
    assert heads and all(c.alpha == pytest.approx(0.62) for c in heads) and measured.head == first
    assert defaults_here.read_choice(tiny_pair.name, tiny_pair.device).head == first  # kept with the choice
    assert defaults_here.complete(measured, tiny_pair.device, first)
    second = offer(here / "second.safetensors", 0.2, seed=1)  # another head: other tensors, another digest
    assert second != first and not defaults_here.complete(measured, tiny_pair.device, second)
    again = defaults_here.ensure(tiny_pair)  # measured again, for the head offered now
    assert again.head == second and all(c.alpha == pytest.approx(0.2) for c in again.candidates if c.drafter == "head")
