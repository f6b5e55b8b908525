"""Callers never choose by engine name: what a source can do is a capability it declares
(specdec.engines.base.Capabilities), so outside specdec/engines/ (where the names are defined and
the one chooser lives) no code compares, tests membership of, matches or dispatches on an engine's
name. Read from the source, the way tests/test_imports.py reads imports."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The engines' names as StepEvent.engine carries them, and the bench's modes of a real engine.
NAMES = {"specdec", "llama.cpp", "vllm"}
MODE_PREFIXES = ("llamacpp_", "vllm_")
# Constants that held engine names or a real engine's bench modes (some are gone; a new one with
# the same name would be caught too).
CONSTANTS = {"SPECDEC", "LLAMA_CPP", "VLLM", "OURS", "LLAMACPP", "REMOTE_ENGINES", "ENGINES"}
ALLOWED = (ROOT / "specdec" / "engines",)  # the names' home and the chooser


def is_engine_name(node: ast.AST) -> bool:
    """A string constant naming an engine (or a real engine's bench mode), a name constant, or a
    tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in NAMES or node.value.startswith(MODE_PREFIXES)
    if isinstance(node, ast.Name):
        return node.id in CONSTANTS
    if isinstance(node, ast.Attribute):
        return node.attr in CONSTANTS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(is_engine_name(e) for e in node.elts)
    return False


def conditionals(tree: ast.AST) -> list[int]:
    """Line numbers of every choice made on an engine's name: a comparison or `in` test with one,
    a dict keyed by one or indexed with one (dispatch), a loop over them, a match case on one."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(is_engine_name(n) for n in (node.left, *node.comparators)):
            found.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(k is not None and is_engine_name(k) for k in node.keys):
            found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_engine_name(node.slice):
            found.append(node.lineno)
        elif isinstance(node, (ast.For, ast.comprehension)) and is_engine_name(node.iter):
            found.append(node.iter.lineno)
        elif isinstance(node, ast.match_case) and any(is_engine_name(n) for n in ast.walk(node.pattern)):
            found.append(node.pattern.lineno)
    return sorted(found)


def sources() -> list[Path]:
    files = [ROOT / "app.py", *(ROOT / "app").rglob("*.py"), *(ROOT / "specdec").rglob("*.py")]
    return [p for p in files if not any(p.is_relative_to(a) for a in ALLOWED)]


def engine_name_conditionals() -> list[str]:
    return [f"{p.relative_to(ROOT)}:{line}" for p in sources() for line in conditionals(ast.parse(p.read_text()))]


def test_no_caller_chooses_by_engine_name():
    found = engine_name_conditionals()
    assert not found, f"{len(found)} engine-name conditionals outside specdec/engines/:\n" + "\n".join(found)


def test_the_count_sees_every_kind_of_choice():
    """The reading can fail: each form of a choice by name is counted once."""
    probe = """
if engine == "llama.cpp": pass
if source.engine != SPECDEC: pass
ok = mode in LLAMACPP
ok = name in ("specdec", "other")
run = {"vllm": f, "x": g}[name]
tables[LLAMA_CPP] = costs
ratios = [f(m) for m in ("vllm_spec", "llamacpp_spec")]
match name:
    case "llama.cpp": pass
label = "llama.cpp"
words = {"spec": 1}
"""
    assert conditionals(ast.parse(probe)) == [2, 3, 4, 5, 6, 7, 8, 10]
