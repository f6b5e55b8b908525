"""The check's JSON record: written whole after every section (and every timed model), so what
ran comes back even when a later section crashes or the call runs out of time.

Each section runs under its own guard: an exception is kept as its type and first line under
`errors`, and the next section runs. A section that needs a failed one is skipped, saying which.
`running` names the section under way when the file was written: after a kill, where it stopped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path


def one_line(err: BaseException) -> str:
    """"Type: first line of the message"."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def guarded(fn: Callable[[], object]) -> tuple[object, str | None]:
    """(fn(), None), or (None, its error in one line)."""
    try:
        return fn(), None
    except Exception as err:  # any failure of one part is kept, and the rest of the check goes on
        return None, one_line(err)


class Record:
    def __init__(self, path: str | None, head: dict):
        self.path = Path(path) if path else None
        self.data = dict(head, done=[], errors={}, section_s={}, running=None)
        self.began = time.perf_counter()

    def ok(self, name: str) -> bool:
        return name in self.data["done"] and name not in self.data["errors"]

    def section(self, name: str, fn: Callable[[], object], needs: tuple[str, ...] = ()) -> object:
        """fn()'s result under `name`, or None with the error kept; the record written either way."""
        missing = [n for n in needs if not self.ok(n)]
        self.data["running"] = name
        self.write()
        began = time.perf_counter()
        if missing:
            result, error = None, f"skipped: needs {', '.join(missing)}, which did not finish"
        else:
            print(f"{name}:", flush=True)
            result, error = guarded(fn)
        if error:
            self.data["errors"][name] = error
            self.data.setdefault(name, None)  # what the section kept before it failed stays
            print(f"  {name} FAILED: {error}", flush=True)
        else:
            self.data[name] = result
        self.data["section_s"][name] = round(time.perf_counter() - began, 2)
        self.data["done"].append(name)
        self.data["running"] = None
        self.write()
        return result

    def write(self) -> None:
        """The whole record, replaced at once (a file cut short by a kill is never left behind)."""
        self.data["seconds"] = round(time.perf_counter() - self.began, 1)
        if self.path is None:
            return
        partial = self.path.with_name(self.path.name + ".part")
        partial.write_text(json.dumps(self.data, indent=1, default=str), encoding="utf-8")
        os.replace(partial, self.path)
