"""`--durations-file PATH`: where the suite's time went, appended to PATH when a run ends: the run's
wall time, every test module's seconds (its tests' setup, call and teardown, its module fixtures
included), slowest first, and the slowest tests. `make test` writes artifacts/test-durations.txt,
one section per pytest run (README, "Two commands"). Registered by tests/conftest.py, so give it as
`--durations-file=PATH`: pytest reads the arguments before that conftest loads, and with a space it
takes an existing PATH for the tests to run and never loads the conftest (tests/test_durations.py)."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

SLOWEST_TESTS = 30

_seconds: dict[str, float] = defaultdict(float)  # by test id: setup + call + teardown
_started: list[float] = []


def pytest_addoption(parser) -> None:
    parser.addoption("--durations-file", default=None, metavar="PATH",
                     help="append the run's time by test module and its slowest tests to PATH")


def pytest_sessionstart(session) -> None:
    _started.append(time.perf_counter())


def pytest_runtest_logreport(report) -> None:
    _seconds[report.nodeid] += report.duration


def pytest_sessionfinish(session, exitstatus) -> None:
    path = session.config.getoption("durations_file")
    if not path or not _seconds:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(summary(session.config, time.perf_counter() - _started[0], int(exitstatus)) + "\n")


def summary(config, wall_s: float, exitstatus: int) -> str:
    modules: dict[str, float] = defaultdict(float)
    for test, seconds in _seconds.items():
        modules[test.split("::")[0]] += seconds
    marks = config.getoption("markexpr") or "all tests"
    lines = [f"== pytest -m {marks!r}, SPECDEC_DTYPE={os.environ.get('SPECDEC_DTYPE', '(unset)')}: "
             f"{len(_seconds)} tests, {wall_s:.0f} s, exit status {exitstatus}", "", "seconds by module, slowest first:"]
    lines += [f"{seconds:9.1f}  {module}" for module, seconds in sorted(modules.items(), key=lambda m: -m[1])]
    lines += ["", f"slowest {SLOWEST_TESTS} tests (setup, call and teardown):"]
    slowest = sorted(_seconds.items(), key=lambda t: -t[1])[:SLOWEST_TESTS]
    lines += [f"{seconds:9.2f}  {test}" for test, seconds in slowest]
    return "\n".join(lines) + "\n"
