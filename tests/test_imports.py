"""specdec's modules depend on one another one way: no import circle, lazy imports included."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specdec"


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that `path` imports anywhere (top level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:  # from .x import y / from . import x
            found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specdec."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("specdec.")}
    return found & modules


def test_no_import_circles():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    graph = {m: imports(PACKAGE / f"{m}.py", modules) for m in modules}
    assert graph["engine"] and graph["detail"]  # the reading sees imports at all
    circles = []

    def walk(start, node, path):
        for nxt in sorted(graph[node]):
            if nxt == start:
                circles.append(" -> ".join([*path, nxt]))
            elif nxt not in path and nxt > start:  # each circle once, from its smallest name
                walk(start, nxt, [*path, nxt])

    for m in sorted(modules):
        walk(m, m, [m])
    assert not circles, circles
