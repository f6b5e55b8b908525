"""The code stays readable in pieces: no function over 60 lines, no module over 450, in the package
and the app, and no function of the algorithm (specdec/core/) with more than 6 parameters. A
function counts from its `def` (decorators excluded) to its last line; `self` and `cls` are not
parameters, `*args` and `**kwargs` are."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 450  # one role per file, however many parts it has (a page declared whole)
MAX_CORE_PARAMETERS = 6


def sources() -> list[Path]:
    return sorted([*(ROOT / "specdec").rglob("*.py"), *(ROOT / "app").rglob("*.py"), ROOT / "app.py"])


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_over_60_lines():
    found = [f for p in sources() for f in long_functions(p)]
    assert not found, "functions over 60 lines:\n" + "\n".join(found)


def test_no_module_over_the_cap():
    found = [f"{p.relative_to(ROOT)} ({n} lines)" for p in sources() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not found, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(found)


def test_the_reading_sees_a_long_function(tmp_path):
    """The check can fail: a 62-line function is reported, a 60-line one is not."""
    probe = tmp_path / "probe.py"
    probe.write_text("def long():\n" + "    x = 1\n" * 61 + "\n\ndef short():\n" + "    x = 1\n" * 59)
    assert long_functions(probe) == ["probe.py:1 long (62 lines)"]


def many_parameters(path: Path, limit: int = MAX_CORE_PARAMETERS) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [x.arg for x in (a.vararg, a.kwarg) if x]
            count = len([n for n in names if n not in ("self", "cls")])
            if count > limit:
                found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{node.lineno} {node.name} ({count} parameters)")
    return found


def test_no_function_of_the_core_takes_over_6_parameters():
    found = [f for p in sorted((ROOT / "specdec" / "core").rglob("*.py")) for f in many_parameters(p)]
    assert not found, "functions of specdec/core with more than 6 parameters:\n" + "\n".join(found)


def test_the_reading_sees_many_parameters(tmp_path):
    """The check can fail: 7 parameters are reported, 6 and self are not."""
    probe = tmp_path / "probe.py"
    probe.write_text("def wide(a, b, c, d, e, f, *, g):\n    pass\n\n\nclass C:\n    def ok(self, a, b, c, d, e, f):\n        pass\n")
    assert many_parameters(probe) == ["probe.py:1 wide (7 parameters)"]
