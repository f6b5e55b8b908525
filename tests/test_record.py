"""specdec.record.run_file: a run saved as JSON comes back as the same run (same HTML, same figures); the CSV
has one row per step with the documented columns; files that are not records of this version are
refused with a message naming what is wrong; loading one needs no model."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pytest

from specdec.record import run_file as rec
from specdec.core.config import GenerationConfig
from tests.support.live import status_details, status_line
from tests.support.runs import run_checked

ROOT = Path(__file__).resolve().parent.parent
CONFIG = GenerationConfig(max_new_tokens=40, k=4, seed=3)


@pytest.fixture(scope="module")
def record(tiny_pair) -> rec.RunRecord:
    spec = run_checked(tiny_pair, "def add(a, b):", CONFIG)
    plain = run_checked(tiny_pair, "def add(a, b):", replace(CONFIG, drafter="none"))
    return rec.RunRecord(prompt="def add(a, b):", config=CONFIG, pair=rec.pair_info(tiny_pair),
                         machine=rec.machine_info(tiny_pair), spec=spec, plain=plain, created=rec.now_utc())


@pytest.fixture(scope="module")
def page():
    from app.page import build_page

    with gr.Blocks():
        return build_page("tiny-random")


def test_json_round_trip_gives_back_the_same_run(record):
    text = rec.to_json(record)
    data = json.loads(text)
    assert data["format"] == rec.FORMAT and data["version"] == rec.VERSION
    assert {"settings", "pair", "machine", "runs", "metrics"} <= set(data)
    assert data["metrics"]["speculative"]["tokens"] == record.spec[-1].total_tokens
    assert data["metrics"]["identical_to_plain"] is True  # tiny-random in fp32: exact parity
    model = data["metrics"]["acceptance_by_position"]["model"]  # the speculative run's, per drafter
    assert model["tested"][0] == model["steps"] == sum(1 for e in record.spec if e.n_drafted)
    assert sum(model["accepted"]) == sum(e.accepted for e in record.spec)
    back = rec.from_json(text)
    assert back.spec == record.spec and back.plain == record.plain  # every field of every event, floats exact
    assert back.config == record.config and back.prompt == record.prompt
    assert back.pair == record.pair and back.machine == record.machine
    assert rec.to_json(back) == text


def test_older_records_load_with_the_k_policy_in_place_of_older_names(record):
    data = json.loads(rec.to_json(record))
    settings = {name: value for name, value in data["settings"].items() if name != "k_policy"}
    for older, policy in (({"pause_unprofitable": False}, "fixed"), ({"pause_unprofitable": True}, "cost"),
                          ({"adaptive_k": True}, "adaptive"), ({"adaptive_k": False}, "fixed"),
                          ({"adaptive_k": True, "pause_unprofitable": True}, "adaptive")):
        data["settings"] = {**settings, **older}
        assert rec.from_json(json.dumps(data)).config.k_policy == policy
    data["settings"] = {**settings, "adaptive_k": "yes"}
    with pytest.raises(rec.RecordError, match="adaptive_k must be true or false"):
        rec.from_json(json.dumps(data))
    shipped = rec.from_json((ROOT / "assets" / "runs" / "qwen2.5-coder-python-function.json").read_text(encoding="utf-8"))
    assert shipped.config.k_policy == "fixed" and all(e.predicted_tok_s is None for e in shipped.spec)


def test_older_records_load_with_dense_in_place_of_bf16(record):
    """The target kernel and draft variant once named `bf16` read as `dense`; the pair's dtype `bf16` stays a dtype."""
    data = json.loads(rec.to_json(record))
    data["settings"] = {**data["settings"], "target_kernel": "bf16", "draft_variant": "bf16-v32k"}
    data["pair"] = {**data["pair"], "dtype": "bf16"}
    back = rec.from_json(json.dumps(data))
    assert (back.config.target_kernel, back.config.draft_variant, back.pair["dtype"]) == ("dense", "dense-v32k", "bf16")
    assert GenerationConfig(target_kernel="bf16", draft_variant="bf16") == GenerationConfig()  # old callers too
    data["settings"]["target_kernel"] = "bf17"
    with pytest.raises(rec.RecordError, match="target_kernel must be one of dense, int8"):
        rec.from_json(json.dumps(data))


def test_a_run_without_plain_decoding_keeps_its_decode_step_and_so_its_c(record):
    alone = replace(record, plain=[], decode_step_s=0.01)
    back = rec.from_json(rec.to_json(alone))
    assert back.decode_step_s == 0.01
    from specdec.measure.metrics import summarize_runs

    assert back.metrics()["speculative"] == summarize_runs(record.spec, None, 0.01).as_dict()  # what the page showed
    assert back.metrics()["speculative"]["cost_ratio_c"] is not None


def test_a_reloaded_run_draws_the_same_html_and_figures(record, page):
    from app.export import record_of, view_of
    from app.view import RunView, frame

    live = RunView(config=record.config, dtype_name=record.pair["dtype"], spec=record.spec, plain=record.plain,
                   finished=True, prompt=record.prompt, pair=record.pair, machine=record.machine, created=record.created)
    reloaded = view_of(rec.from_json(rec.to_json(record_of(live))))
    before, after = frame(page, live), frame(page, reloaded)
    for html in (page.spec_html, page.plain_html, page.stats):
        assert after[html] == before[html], html
    assert "identical to plain decoding" in after[page.stats]
    for plot in page.plots():
        assert after[plot].to_plotly_json() == before[plot].to_plotly_json()


def test_csv_has_one_row_per_step_with_the_documented_columns(record):
    rows = list(csv.DictReader(io.StringIO(rec.to_csv(record))))
    columns = [name for name, _ in rec.CSV_COLUMNS]
    assert list(rows[0]) == columns
    assert len(rows) == len(record.spec) + len(record.plain)
    for lane, events in (("speculative", record.spec), ("plain", record.plain)):
        lane_rows = [r for r in rows if r["run"] == lane]
        assert [int(r["step"]) for r in lane_rows] == list(range(len(events)))
        for r, e in zip(lane_rows, events):
            assert (int(r["drafted"]), int(r["accepted"]), int(r["rejected"]), int(r["emitted"])) == (
                len(e.drafted), e.accepted, len(e.drafted) - e.accepted, len(e.emitted))
            assert r["kind"] == e.kind and r["drafter"] == e.drafter and int(r["total_tokens"]) == e.total_tokens
            assert r["text"] == "".join(e.emitted_text)  # newlines and quotes survive the CSV quoting
            assert float(r["elapsed_s"]) == pytest.approx(e.elapsed_s, abs=1e-6)
    readme = (ROOT / "docs" / "presenting.md").read_text()
    for name in columns:
        assert f"`{name}`" in readme, f"docs/presenting.md does not document CSV column {name}"


def test_written_files_are_the_json_and_the_csv(record, tmp_path):
    json_path, csv_path = rec.write_files(record, str(tmp_path))
    assert rec.from_json(Path(json_path).read_bytes()).spec == record.spec
    assert Path(csv_path).read_bytes().decode("utf-8") == rec.to_csv(record)


def _edited(record, edit) -> str:
    data = json.loads(rec.to_json(record))
    edit(data)
    return json.dumps(data)


def _set(path, value):
    def edit(data):
        *head, last = path
        for key in head:
            data = data[key]
        data[last] = value
    return edit


def _renamed(name, older, value):
    """The field under the name older files gave it."""
    def edit(data):
        del data[name]
        data[older] = value
    return edit


def _drop(path):
    def edit(data):
        *head, last = path
        for key in head:
            data = data[key]
        del data[last]
    return edit


BAD = [
    ("not json", lambda r: "{this is not json", "invalid JSON at line 1"),
    ("binary", lambda r: b"\xff\xfe\x00garbage", "not UTF-8"),
    ("a list", lambda r: "[1, 2, 3]", '"format": "specdec-run"'),
    ("another format", lambda r: json.dumps({"format": "something-else", "version": 1}), '"format": "specdec-run"'),
    ("newer version", lambda r: _edited(r, _set(["version"], 2)), "version 2 cannot be read here: this app reads version 1"),
    ("no version", lambda r: _edited(r, _drop(["version"])), "version None cannot be read"),
    ("no runs", lambda r: _edited(r, _drop(["runs"])), "runs: expected an object"),
    ("no steps", lambda r: _edited(r, _set(["runs", "speculative"], [])), "runs.speculative: the record has no steps"),
    ("missing field", lambda r: _edited(r, _drop(["runs", "speculative", 2, "emitted"])), "runs.speculative[2].emitted: missing"),
    ("wrong type", lambda r: _edited(r, _set(["runs", "plain", 0, "accepted"], "none")),
     'runs.plain[0].accepted: expected an integer, got "none"'),
    ("wrong list", lambda r: _edited(r, _set(["runs", "speculative", 0, "p_target"], ["high"])),
     "runs.speculative[0].p_target: expected a list of numbers"),
    ("unknown field", lambda r: _edited(r, _set(["runs", "speculative", 1, "colour"], "red")),
     "runs.speculative[1]: unknown field 'colour'"),
    ("broken contract", lambda r: _edited(r, _set(["runs", "speculative", 0, "total_tokens"], 999)),
     "runs.speculative: the steps break the event contract: step 0: total 999"),
    ("bad setting", lambda r: _edited(r, _set(["settings", "k"], 0)), "settings: k must be an integer in 1..32, got 0"),
    ("unknown setting", lambda r: _edited(r, _set(["settings", "turbo"], True)), "settings: unknown field 'turbo'"),
    ("plain that drafts", lambda r: _edited(r, _set(["runs", "plain"], json.loads(rec.to_json(r))["runs"]["speculative"])),
     "runs.plain: plain decoding drafts nothing"),
    ("bad decode step", lambda r: _edited(r, _set(["decode_step_s"], -1)),
     "decode_step_s: expected a positive number or null, got -1"),
    ("bad decode step, older name", lambda r: _edited(r, _renamed("decode_step_s", "one_token_pass_s", -1)),
     "one_token_pass_s: expected a positive number or null, got -1"),
]


@pytest.mark.parametrize("name, make, message", BAD, ids=[b[0] for b in BAD])
def test_bad_and_foreign_files_are_refused_with_a_message(record, name, make, message):
    with pytest.raises(rec.RecordError) as err:
        rec.from_json(make(record))
    assert message in str(err.value)


def test_loading_in_the_app_needs_no_model_and_refuses_bad_files(record, page, tmp_path, monkeypatch):
    import specdec.models.pair
    from app import export

    def no_model(*args, **kwargs):
        raise AssertionError("loading a record must not load a model")

    monkeypatch.setattr(specdec.models.pair, "load_pair", no_model)
    good = tmp_path / "run.json"
    good.write_text(rec.to_json(record), encoding="utf-8")
    out = export.load(page, {page.load_run: str(good), page.show_rejected: True})
    assert out[page.run_view].spec == record.spec and out[page.run_view].finished
    assert status_line(out[page.status]).startswith("Loaded from a file: tiny-random, recorded ")
    assert status_details(out[page.status]).startswith("On cpu (")
    assert out[page.spec_html].count("tok-") > 0

    bad = tmp_path / "bad.json"
    bad.write_text(_edited(record, _set(["version"], 99)), encoding="utf-8")
    with pytest.warns(UserWarning):  # gr.Warning outside a request is a Python warning
        out = export.load(page, {page.load_run: str(bad), page.show_rejected: True})
    assert set(out) == {page.status}  # what was on screen stays
    assert status_line(out[page.status]).startswith("Not loaded: run record version 99")


def test_export_files_only_for_a_finished_run(record):
    from app.export import files
    from app.view import RunView

    view = RunView(config=record.config, dtype_name="fp32", spec=record.spec, plain=record.plain, pair=record.pair)
    assert files(None) == {} and files(view) == {}  # still running: nothing to download yet
    view.finished = True
    out = files(view)
    assert out["json"]["value"].endswith(".json") and out["csv"]["value"].endswith(".csv")
    assert rec.from_json(Path(out["json"]["value"]).read_text()).spec == record.spec

