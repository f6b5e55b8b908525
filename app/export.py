"""Export the run on screen (JSON and CSV, specdec.record.run_file) and load a saved JSON to show it again.

Loading needs no model: a talk on a machine without the models, or a run recorded on a GPU machine
shown on a laptop. A file that is not a record this version reads is refused with the reason, and
what was on screen stays.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr

from specdec.record.run_file import RecordError, RunRecord, from_json, write_files

from .page import Page
from .view import RunView, frame

MAX_BYTES = 64 * 2**20  # a 2048-token run of both lanes is a few MB; anything far larger is not a record


def section(page: Page) -> None:
    with gr.Row(elem_id="export-bar"):
        page.export_json = gr.DownloadButton("Export JSON", elem_id="export-json", interactive=False, size="sm")
        page.export_csv = gr.DownloadButton("Export CSV", elem_id="export-csv", interactive=False, size="sm")
        page.load_run = gr.UploadButton("Load a run (JSON)", elem_id="load-run", file_types=[".json"], size="sm")


def record_of(view: RunView) -> RunRecord:
    return RunRecord(prompt=view.prompt, config=view.config, pair=view.pair, machine=view.machine,
                     spec=list(view.spec), plain=list(view.plain), stopped=view.stopped, created=view.created,
                     one_token_pass_s=view.one_token_pass_s)


def view_of(record: RunRecord, show_rejected: bool = True) -> RunView:
    pair, machine = record.pair, record.machine
    where = f"{pair.get('name', '?')} on {pair.get('device', '?')} ({pair.get('dtype', '?')})"
    status = f"Loaded from a file: {where}, recorded {record.created or 'at an unknown time'} on {machine.get('cpu', 'an unknown machine')}"
    return RunView(config=record.config, dtype_name=pair.get("dtype", "fp32"), status=status, spec=list(record.spec),
                   plain=list(record.plain), finished=True, stopped=record.stopped, show_rejected=show_rejected,
                   prompt=record.prompt, pair=dict(pair), machine=dict(machine), created=record.created,
                   one_token_pass_s=record.one_token_pass_s)


def files(view: RunView | None) -> dict:
    """The download buttons' files for the run on screen (none until a run has finished)."""
    if view is None or not view.finished or not view.spec:
        return {}
    json_path, csv_path = write_files(record_of(view), tempfile.mkdtemp(prefix="specdec-export-"))
    return {"json": gr.update(value=json_path, interactive=True), "csv": gr.update(value=csv_path, interactive=True)}


def read_record(path: str | None) -> RunRecord:
    if not path:
        raise RecordError("no file was uploaded")
    size = Path(path).stat().st_size
    if size > MAX_BYTES:
        raise RecordError(f"the file is {size / 2**20:.0f} MB; a run record is at most {MAX_BYTES // 2**20} MB")
    return from_json(Path(path).read_bytes())


def load(page: Page, values: dict) -> dict:
    try:
        record = read_record(values[page.load_run])
    except RecordError as err:
        gr.Warning(f"Not loaded: {err}")
        return {page.status: f"Not loaded: {err}"}
    return frame(page, view_of(record, bool(values[page.show_rejected])))


def wire_load(page: Page):
    """Load a file on upload; returns the event, after which the loaded run is on screen."""
    return page.load_run.upload(lambda values: load(page, values), {page.load_run, page.show_rejected},
                                page.run_outputs(), concurrency_limit=None)


def wire(page: Page, shown: list) -> None:
    """Refresh the download files after every event in `shown` (each puts a new run on screen)."""

    def refresh(view):
        out = files(view)  # nothing yet (a run that did not finish): both buttons stay as they are
        return (out["json"], out["csv"]) if out else (gr.update(), gr.update())

    for event in shown:
        event.then(refresh, page.run_view, [page.export_json, page.export_csv], show_progress="hidden")
