"""The code stays readable in pieces: no function over 60 lines, no module over 450, in the package
and the app. A function counts from its `def` (decorators excluded) to its last line."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 450  # one role per file, however many parts it has (a page declared whole)


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
