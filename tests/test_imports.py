"""specdec's modules depend on one another one way: no import circle, and a layer never imports a
layer above it (lazy imports inside functions included; imports under `if TYPE_CHECKING:` are
annotations only and do not count)."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specdec"

# Lowest first. A module may import its own layer and any layer before it in this list.
LAYERS = ("core", "models", "kernels", "measure", "train", "engines", "serving", "record", "bench", "cli")
# The package's entry point (`python -m specdec`) sits above every layer.
TOP = {"__main__"}
# (importer, imported): an import against the layer order, with the reason it stays.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("models.pair", "kernels.attention"): "a pair's models get their device's attention where they are loaded "
                                          "(build_pair, a lazy import); the attention paths are kernels",
}


def module_name(path: Path) -> str:
    """specdec/core/events.py -> 'core.events'; specdec/__main__.py -> '__main__'."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _runtime_nodes(tree: ast.AST):
    """Every node of the tree except those inside an `if TYPE_CHECKING:` block."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules that `path` imports anywhere (top level or inside a function)."""
    inside = path.is_relative_to(PACKAGE)
    own = module_name(path).split(".") if inside else []
    package = own if path.name == "__init__.py" else own[:-1]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from .x import y / from . import x
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                mod = ".".join([*base, node.module] if node.module else base)
            elif (node.module or "").startswith("specdec."):
                mod = node.module.removeprefix("specdec.")
            elif node.module == "specdec":
                mod = ""
            else:
                continue
            names = [f"{mod}.{a.name}".strip(".") for a in node.names] + [mod]
        elif isinstance(node, ast.Import):
            names = [a.name.removeprefix("specdec.") for a in node.names if a.name.startswith("specdec.")]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != "__init__":
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(p, set(mods)) - {m} for m, p in mods.items()}


def layer(module: str) -> int:
    if module in TOP:
        return len(LAYERS)
    return LAYERS.index(module.split(".")[0])


def test_every_module_is_in_a_layer():
    loose = [m for m in modules() if m not in TOP and m != "__init__" and m.split(".")[0] not in LAYERS]
    assert not loose, f"modules outside the layer folders {LAYERS}: {loose}"


def test_no_import_circles():
    g = graph()
    assert g["core.decoding"] and g["core.detail"]  # the reading sees imports at all
    circles = []

    def walk(start, node, path):
        for nxt in sorted(g.get(node, ())):
            if nxt == start:
                circles.append(" -> ".join([*path, nxt]))
            elif nxt not in path and nxt > start:  # each circle once, from its smallest name
                walk(start, nxt, [*path, nxt])

    for m in sorted(g):
        walk(m, m, [m])
    assert not circles, circles


def test_layers_import_downward_only():
    g = graph()
    upward = sorted((m, n) for m, deps in g.items() for n in deps
                    if m != "__init__" and n != "__init__" and layer(n) > layer(m))
    unexplained = [f"{m} imports {n} ({LAYERS[layer(m)]} < {LAYERS[layer(n)] if n not in TOP else 'top'})"
                   for m, n in upward if (m, n) not in EXCEPTIONS]
    assert not unexplained, "a lower layer imports a higher one:\n" + "\n".join(unexplained)
    stale = [pair for pair in EXCEPTIONS if pair not in upward]
    assert not stale, f"listed exceptions that no longer happen (remove them): {stale}"


def test_the_reading_sees_an_upward_import(tmp_path):
    """The layer check can fail: a core module that imports the bench is reported."""
    fake = PACKAGE / "core" / "decoding.py"
    assert "bench.runner" not in imports(fake, set(modules()))
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from specdec.bench.runner import run_bench\n")
    found = imports(probe, set(modules()))
    assert found == {"bench.runner"}


def test_settings_are_checked_without_torch():
    """GenerationConfig.validate checks variant and kernel names from core alone: importing the
    settings and validating them (good names and bad) loads neither torch nor transformers."""
    script = (
        "import sys\n"
        "from specdec.core.config import GenerationConfig\n"
        "GenerationConfig(draft_variant='int4-v32k', target_kernel='q4k').validate()\n"
        "for bad in ({'draft_variant': 'int3'}, {'target_kernel': 'fp8'}):\n"
        "    try:\n"
        "        GenerationConfig(**bad).validate()\n"
        "    except ValueError:\n"
        "        pass\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_only_the_bench_command_imports_the_bench():
    """generate and the page run this project's engine through specdec.engines.ours, not through
    the benchmark: of app/ and specdec/cli/, only the bench command imports specdec.bench."""
    known = set(modules())
    front = [*sorted((PACKAGE.parent / "app").glob("*.py")), *sorted((PACKAGE / "cli").glob("*.py"))]
    assert PACKAGE / "cli" / "bench.py" in front and any("bench." in n for n in imports(PACKAGE / "cli" / "bench.py", known))
    importers = [str(p.relative_to(PACKAGE.parent)) for p in front if p.name != "bench.py" or p.parent.name != "cli"
                 if any(n == "bench" or n.startswith("bench.") for n in imports(p, known))]
    assert not importers, f"modules that reach the bench: {importers}"


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name `path` imports (top level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_no_test_module_imports_another_and_no_script_reaches_into_tests():
    """Code the tests share lives in tests/support/, imported as tests.support.x: a test module (or
    conftest) imported by another would be loaded twice, under two names. Scripts and experiments run
    from the repository root (`python -m scripts.x`), so none edits sys.path, and none imports from
    tests/ (what a script shares with the tests, such as the page's client app/client.py, lives in
    the project)."""
    root = PACKAGE.parent
    tests = [p for p in (root / "tests").rglob("*.py")]
    outside = [*(root / "scripts").rglob("*.py"), *(root / "experiments").rglob("*.py")]
    wrong = {}
    for path in tests + outside:
        names = imported_modules(path)
        may_share = path not in outside  # tests/support is the tests' own
        bad = {n for n in names if n.split(".")[0] in ("conftest", "runner_checks") or n.split(".")[0].startswith("test_")
               or (n.split(".")[0] == "tests" and not (may_share and n.startswith("tests.support.")))}
        if bad:
            wrong[str(path.relative_to(root))] = sorted(bad)
    assert wrong == {}
    assert [str(p.relative_to(root)) for p in outside if "sys.path" in p.read_text()] == []
    assert (root / "tests" / "support" / "__init__.py").is_file()
