"""A run on disk: the settings, the pair, the machine, every event of both runs and their metrics,
as versioned JSON; and the same steps as CSV, one row per step.

The events are the record; the metrics in the file are a convenience for readers of the file (jq,
a spreadsheet) and are recomputed from the events when a record is loaded. Loading checks every
field and the event contract, and refuses a file it cannot trust with a message that names the
field that is wrong, so a talk never shows a half-read run.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import time
from dataclasses import MISSING, asdict, dataclass, field, fields

from specdec.measure.compare import first_difference
from specdec.core.config import GenerationConfig
from specdec.core.events import StepEvent, check_invariants
from specdec.measure.metrics import summarize, summarize_runs
from specdec.measure.positions import by_drafter

FORMAT = "specdec-run"  # the "format" field: what kind of file this is
VERSION = 1  # the "version" field: bumped whenever a field changes meaning or is removed
LANES = ("speculative", "plain")  # keys of "runs" and "metrics", and the CSV's `run` column

# One row per step of either run; (column, what it holds). README.md documents the same list.
CSV_COLUMNS = (
    ("run", "speculative or plain"),
    ("step", "0-based index of the target forward pass"),
    ("k", "draft length asked for this step (0 for plain decoding)"),
    ("drafter", "who drafted this step: model, lookup, head ... (empty: nothing drafted)"),
    ("drafted", "draft tokens proposed"),
    ("accepted", "draft tokens the target kept (a prefix of the drafted ones)"),
    ("rejected", "draft tokens the target turned down"),
    ("emitted", "tokens added to the output this step (accepted + the target's own)"),
    ("kind", "the last emitted token: correction, bonus, plain, or eos (an accepted draft ended the run)"),
    ("draft_s", "seconds spent drafting this step (empty: the engine does not report it apart)"),
    ("verify_s", "seconds spent in the target pass this step (empty: the engine does not report it apart)"),
    ("elapsed_s", "seconds since the run started, at the end of this step"),
    ("total_tokens", "output tokens so far"),
    ("text", "text of the emitted tokens"),
    ("rejected_text", "text of the rejected draft tokens (empty where the engine does not send it)"),
)


class RecordError(ValueError):
    """A file that is not a run record this version can show; the message says what is wrong."""


@dataclass
class RunRecord:
    prompt: str
    config: GenerationConfig
    pair: dict  # name, target, draft, device, dtype, source
    machine: dict  # what the run ran on (cpu, cores, torch, ...), for the reader of the file
    spec: list[StepEvent]
    plain: list[StepEvent] = field(default_factory=list)  # empty when the run was not compared
    stopped: bool = False  # stopped by the user before the end
    created: str = ""  # UTC time of the run, ISO 8601
    decode_step_s: float | None = None  # a decode step timed after the run, when plain decoding did not run

    def metrics(self) -> dict:
        """What the page's stats row shows, per run; the comparison only for two complete runs."""
        spec = summarize_runs(self.spec, self.plain, self.decode_step_s)  # c in the plain run's decode steps
        plain = summarize(self.plain) if self.plain else None
        out = {"speculative": spec.as_dict(), "plain": plain.as_dict() if plain else None,
               "speedup": None, "identical_to_plain": None, "first_difference": None,
               "acceptance_by_position": {name: f.as_dict() for name, f in by_drafter(self.spec).items()}}
        if plain is not None and plain.tokens_per_s > 0:
            out["speedup"] = spec.tokens_per_s / plain.tokens_per_s
        if plain is not None and not self.stopped and self.config.greedy:
            diff = first_difference(self.spec, self.plain, self.pair.get("dtype", "fp32"), self.config.target_kernel,
                                    str(self.pair.get("device", "cpu")).split(":")[0])
            out["identical_to_plain"] = diff is None
            out["first_difference"] = diff.as_dict() if diff else None
        return out


def pair_info(pair) -> dict:
    """The pair as the record keeps it (a ModelPair has tensors; the record keeps only names)."""
    from specdec.models.presets import PRESETS

    preset = PRESETS.get(pair.name)
    return {
        "name": pair.name,
        "target": preset.target_id if preset else pair.name,
        "draft": preset.draft_id if preset else None,
        "device": str(pair.device),
        "dtype": pair.dtype_name,
        "source": pair.source,
    }


def machine_info(pair) -> dict:
    """The benchmark's machine description plus the CPU flag that decides how fast bf16 runs."""
    from specdec.models import machine

    return {**machine.machine_info(pair), "avx512_bf16": "avx512_bf16" in machine.cpu_flags(), "platform": platform.platform()}


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --- JSON ---------------------------------------------------------------------------------------


def to_dict(record: RunRecord) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "created": record.created,
        "prompt": record.prompt,
        "settings": asdict(record.config),
        "pair": record.pair,
        "machine": record.machine,
        "stopped": record.stopped,
        "decode_step_s": record.decode_step_s,
        "runs": {"speculative": [_event_dict(e) for e in record.spec], "plain": [_event_dict(e) for e in record.plain]},
        "metrics": record.metrics(),
    }


def to_json(record: RunRecord) -> str:
    return json.dumps(to_dict(record), ensure_ascii=False, indent=1)


def _event_dict(event: StepEvent) -> dict:
    return {f.name: list(v) if isinstance(v := getattr(event, f.name), tuple) else v for f in fields(StepEvent)}


def from_json(text: str | bytes) -> RunRecord:
    """Parse and check a record; RecordError names the first thing that is wrong."""
    try:
        data = json.loads(text.decode("utf-8-sig") if isinstance(text, bytes) else text)
    except UnicodeDecodeError:
        raise RecordError("not a run record: the file is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise RecordError(f"not a run record: invalid JSON at line {err.lineno}, column {err.colno} ({err.msg})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordError(f'not a run record: expected a JSON object with "format": "{FORMAT}"')
    version = data.get("version")
    if version != VERSION:
        raise RecordError(f"run record version {version!r} cannot be read here: this app reads version {VERSION} "
                          "(export the run again with a matching version of the app)")
    for key, kind in (("prompt", str), ("settings", dict), ("pair", dict), ("machine", dict), ("stopped", bool), ("runs", dict)):
        if not isinstance(data.get(key), kind):
            raise RecordError(f"{key}: expected {_NAMES[kind]}, got {_shown(data.get(key))}")
    config = _config(data["settings"])
    runs = data["runs"]
    lanes = {}
    for lane in LANES:
        events = runs.get(lane)
        if not isinstance(events, list):
            raise RecordError(f"runs.{lane}: expected a list of steps, got {_shown(events)}")
        lanes[lane] = [_event(e, f"runs.{lane}[{i}]") for i, e in enumerate(events)]
        try:
            check_invariants(lanes[lane])
        except AssertionError as err:
            raise RecordError(f"runs.{lane}: the steps break the event contract: {err}") from None
    if not lanes["speculative"]:
        raise RecordError("runs.speculative: the record has no steps to show")
    if any(e.n_drafted for e in lanes["plain"]):
        raise RecordError("runs.plain: plain decoding drafts nothing, but a step has drafted tokens")
    created = data.get("created", "")
    # optional: absent in files written before it was kept, and named one_token_pass_s in older ones
    name = "decode_step_s" if "decode_step_s" in data else "one_token_pass_s"
    decode_step_s = data.get(name)
    if decode_step_s is not None and not (_is(decode_step_s, float) and decode_step_s > 0):
        raise RecordError(f"{name}: expected a positive number or null, got {_shown(decode_step_s)}")
    return RunRecord(prompt=data["prompt"], config=config, pair=data["pair"], machine=data["machine"],
                     spec=lanes["speculative"], plain=lanes["plain"], stopped=data["stopped"],
                     created=created if isinstance(created, str) else "", decode_step_s=decode_step_s)


def _config(settings: dict) -> GenerationConfig:
    settings = _renamed(settings)
    known = {f.name for f in fields(GenerationConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise RecordError(f"settings: unknown field {unknown[0]!r}")
    try:
        return GenerationConfig(**settings).validate()
    except (TypeError, ValueError) as err:
        raise RecordError(f"settings: {err}") from None


def _renamed(settings: dict) -> dict:
    """Settings as older records wrote them, in today's names: `adaptive_k: true` is k_policy
    "adaptive" (it won over any other k_policy); `pause_unprofitable` (stop drafting while it did
    not pay) is the cost K policy, k_policy "cost". The target kernel and draft variant once called
    `bf16` (`bf16-v32k`) are `dense` (`dense-v32k`): GenerationConfig reads the old names itself
    (specdec/core/variant_names.py `canonical`)."""
    settings = dict(settings)
    for old in ("adaptive_k", "pause_unprofitable"):
        if old in settings and not isinstance(settings[old], bool):
            raise RecordError(f"settings: {old} must be true or false, got {_shown(settings[old])}")
    adaptive, pause = settings.pop("adaptive_k", False), settings.pop("pause_unprofitable", False)
    if adaptive:
        settings["k_policy"] = "adaptive"
    elif pause and settings.get("k_policy", "fixed") == "fixed":
        settings["k_policy"] = "cost"
    return settings


_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "text", dict: "an object", list: "a list"}


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=False) if value is not None else "nothing"
    return text if len(text) <= 40 else text[:37] + "..."


def _is(value, kind) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


# StepEvent's annotations (strings under `from __future__ import annotations`) -> (kind, is a tuple, may be None).
_TYPES = {
    "int": (int, False, False), "float": (float, False, False), "bool": (bool, False, False), "str": (str, False, False),
    "str | None": (str, False, True), "tuple[int, ...]": (int, True, False), "tuple[float, ...]": (float, True, False),
    "tuple[str, ...]": (str, True, False), "float | None": (float, False, True),
    "tuple[float, ...] | None": (float, True, True),
}


def _event(data, where: str) -> StepEvent:
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object, got {_shown(data)}")
    known = {f.name: f for f in fields(StepEvent)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise RecordError(f"{where}: unknown field {unknown[0]!r}")
    values = {}
    for name, f in known.items():
        if name not in data:
            if f.default is not MISSING or f.default_factory is not MISSING:  # fields with a default may be left out
                continue
            raise RecordError(f"{where}.{name}: missing")
        kind, is_tuple, nullable = _TYPES.get(f.type, (None, False, True))
        value = data[name]
        if kind is None or (nullable and value is None):
            values[name] = value
        elif is_tuple:
            if not isinstance(value, list) or not all(_is(v, kind) for v in value):
                raise RecordError(f"{where}.{name}: expected a list of {_NAMES[kind].removeprefix('an ').removeprefix('a ')}s, "
                                  f"got {_shown(value)}")
            values[name] = tuple(float(v) if kind is float else v for v in value)
        elif not _is(value, kind):
            raise RecordError(f"{where}.{name}: expected {_NAMES[kind]}, got {_shown(value)}")
        else:
            values[name] = float(value) if kind is float else value
    return StepEvent(**values)


# --- CSV ----------------------------------------------------------------------------------------


def csv_rows(record: RunRecord) -> list[dict]:
    rows = []
    for lane, events in zip(LANES, (record.spec, record.plain)):
        for e in events:
            rows.append({
                "run": lane, "step": e.step, "k": e.k, "drafter": e.drafter, "drafted": e.n_drafted, "accepted": e.accepted,
                "rejected": e.n_rejected, "emitted": len(e.emitted), "kind": e.kind,
                "draft_s": _seconds(e.draft_s), "verify_s": _seconds(e.verify_s), "elapsed_s": _seconds(e.elapsed_s),
                "total_tokens": e.total_tokens, "text": "".join(e.emitted_text),
                "rejected_text": "".join(e.drafted_text[e.accepted:]),
            })
    return rows


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"  # empty: the engine did not report it


def to_csv(record: RunRecord) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[name for name, _ in CSV_COLUMNS])  # RFC 4180: CRLF, quotes any \r or \n
    writer.writeheader()
    writer.writerows(csv_rows(record))
    return out.getvalue()


def write_files(record: RunRecord, folder: str) -> tuple[str, str]:
    """Write run.json and run.csv into `folder`; return their paths. The names carry the time of the run."""
    stamp = (record.created or now_utc()).replace(":", "").replace("-", "")
    base = os.path.join(folder, f"specdec-run-{stamp}")
    with open(base + ".json", "w", encoding="utf-8") as f:
        f.write(to_json(record))
    with open(base + ".csv", "w", encoding="utf-8", newline="") as f:
        f.write(to_csv(record))
    return base + ".json", base + ".csv"
