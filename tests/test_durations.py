"""`make test`'s durations file (tests/support/durations.py): each pytest run appends its time by test
module, slowest first, and its slowest tests."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_each_run_appends_its_modules_and_slowest_tests(tmp_path):
    # Laid out as `make test` runs: no path argument, the tests found through testpaths and their
    # conftest, and the durations file named in the Makefile's form. With a space before the path,
    # pytest took the path for a test path once the file existed, skipped the tests' conftest, and
    # the second run stopped on an unknown option.
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests_here\n")
    tests = tmp_path / "tests_here"
    tests.mkdir()
    (tests / "conftest.py").write_text('pytest_plugins = ("tests.support.durations",)\n')
    (tests / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(0.3)\n\ndef test_quick():\n    pass\n")
    (tests / "test_other.py").write_text("def test_other():\n    pass\n")
    out = tmp_path / "artifacts" / "durations.txt"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--durations-file={out.relative_to(tmp_path)}"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for _ in range(2):
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    sections = out.read_text().split("== pytest ")[1:]
    assert len(sections) == 2
    head, _, rest = sections[0].partition("seconds by module, slowest first:\n")
    assert re.match(r"-m 'all tests', SPECDEC_DTYPE=\S+: 3 tests, \d+ s, exit status 0", head)
    modules = [line.split()[1] for line in rest.split("\n\n")[0].splitlines()]
    assert modules == ["tests_here/test_slow.py", "tests_here/test_other.py"]
    slowest = rest.split("(setup, call and teardown):\n")[1].strip().splitlines()
    assert slowest[0].split()[1] == "tests_here/test_slow.py::test_slow" and float(slowest[0].split()[0]) >= 0.3 and len(slowest) == 3


def test_the_makefile_names_the_durations_file_with_an_equals_sign():
    """`--durations-file PATH` with a space makes pytest read PATH as a test path before the option is
    known (test above); `make test` must use the `=` form on each of its pytest runs."""
    recipe = (ROOT / "Makefile").read_text()
    runs = [line for line in recipe.splitlines() if "-m pytest" in line and not line.lstrip().startswith("#")]
    assert runs and all("--durations-file=" in line for line in runs), runs
