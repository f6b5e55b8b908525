"""Text that every machine with the project installed has: the Python sources and docs of the installed packages.

Nothing is downloaded. The files are listed in a fixed order (their paths under site-packages),
shuffled by the seed, and read one at a time, so a seed names the same documents on the same
installation. Files that are not text a person wrote (generated tables, minified or vendored
blobs, very long lines) are skipped.
"""

from __future__ import annotations

import random
import sysconfig
from collections.abc import Iterator
from pathlib import Path

SUFFIXES = (".py", ".pyi", ".md", ".rst", ".txt")
MIN_BYTES, MAX_BYTES = 800, 60_000  # skip stubs and very large (often generated) files
MAX_LINE = 300  # a longer line marks generated or minified text
SKIP_PARTS = {"__pycache__", "site-packages-vendored", "_vendor", "vendored"}
SKIP_NAMES = ("LICENSE", "COPYING", "RECORD", "top_level.txt", "entry_points.txt", "requires.txt", "SOURCES.txt")


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def candidate_files(root: Path | None = None) -> list[Path]:
    """Every file under `root` (default: site-packages) with a text suffix and a usable size, sorted by path."""
    root = root or site_packages()
    found = []
    for path in root.rglob("*"):
        if path.suffix not in SUFFIXES or not path.is_file() or SKIP_PARTS & set(path.parts):
            continue
        if path.name.startswith(SKIP_NAMES) or ".dist-info" in str(path.parent):
            continue
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if MIN_BYTES <= size <= MAX_BYTES:
            found.append(path)
    return sorted(found, key=lambda p: str(p.relative_to(root)))


def readable(path: Path) -> str | None:
    """The file's text, or None when it is not UTF-8 or looks generated."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    if not lines or max(len(line) for line in lines) > MAX_LINE:
        return None
    if sum(c.isalpha() for c in text) < 0.4 * len(text):  # tables of numbers, data files
        return None
    return text


def documents(seed: int, root: Path | None = None) -> Iterator[tuple[str, str]]:
    """(name, text) of the usable files in the seed's order; name is the path under `root`."""
    root = root or site_packages()
    files = candidate_files(root)
    random.Random(seed).shuffle(files)
    for path in files:
        text = readable(path)
        if text is not None:
            yield str(path.relative_to(root)), text


def chunks(ids: list[int], size: int, min_size: int = 32) -> list[list[int]]:
    """A document's tokens cut into pieces of `size` (the last one shorter; a tail under `min_size` dropped)."""
    pieces = [ids[i : i + size] for i in range(0, len(ids), size)]
    return [p for p in pieces if len(p) >= min_size]
