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

from .components import Page
from .render import render_status
from .view import RunView, frame

MAX_BYTES = 64 * 2**20  # a 2048-token run of both lanes is a few MB; anything far larger is not a record


def record_of(view: RunView) -> RunRecord:
    return RunRecord(prompt=view.prompt, config=view.config, pair=view.pair, machine=view.machine,
                     spec=list(view.spec), plain=list(view.plain), stopped=view.stopped, created=view.created,
                     decode_step_s=view.decode_step_s)


def view_of(record: RunRecord, show_rejected: bool = True) -> RunView:
    pair, machine = record.pair, record.machine
    status = f"Loaded from a file: {pair.get('name', '?')}, recorded {record.created or 'at an unknown time'}"
    details = f"On {pair.get('device', '?')} ({pair.get('dtype', '?')}), on {machine.get('cpu', 'an unknown machine')}."
    return RunView(config=record.config, dtype_name=pair.get("dtype", "fp32"), status=status, status_details=details, spec=list(record.spec),
                   plain=list(record.plain), finished=True, stopped=record.stopped, show_rejected=show_rejected,
                   prompt=record.prompt, pair=dict(pair), machine=dict(machine), created=record.created,
                   decode_step_s=record.decode_step_s)


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
        return {page.status: render_status(f"Not loaded: {err}")}
    return frame(page, view_of(record, bool(values[page.show_rejected])))


def download_updates(view: RunView | None) -> tuple:
    """The two download buttons after a run was put on screen: its files, or (a run that did not
    finish) both buttons as they are."""
    out = files(view)
    return (out["json"], out["csv"]) if out else (gr.update(), gr.update())
