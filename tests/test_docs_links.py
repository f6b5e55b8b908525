"""The README and docs/ link to one another by relative paths and `#anchor`s: every such link must
point at a file of the repository and, where it names an anchor, at a heading of that file (the
anchor as GitHub spells it). The README stays a front door: the reference lives in docs/."""

import re
from pathlib import Path

import pytest

from tests.support.docs import HEADING, INLINE_CODE, prose_lines, slug

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MOST_BYTES = 12 * 1024

# [text](target) and ![alt](target), an optional "title" after the target
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto: ...


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path):
    """(line number, target) of every link in the file that is not to another site. A link's text
    may run over a line break, so the prose is searched as one text (code blanked out)."""
    kept = dict(prose_lines(path))
    count = len(path.read_text(encoding="utf-8").splitlines())
    prose = "\n".join(INLINE_CODE.sub("", kept.get(n, "")) for n in range(1, count + 1))
    for match in LINK.finditer(prose):
        target = match.group(1)
        if not SCHEME.match(target):
            yield prose.count("\n", 0, match.start()) + 1, target


def broken(path: Path, target: str) -> str | None:
    """Why a link from `path` to `target` leads nowhere, or None when it leads somewhere."""
    file_part, _, anchor = target.partition("#")
    linked = (path.parent / file_part).resolve() if file_part else path
    if not linked.is_relative_to(ROOT):
        return f"{target}: outside the repository"
    if not linked.exists():
        return f"{target}: no file {linked.relative_to(ROOT)}"
    if anchor and linked.suffix == ".md" and anchor not in anchors(linked):
        return f"{target}: no heading with anchor #{anchor} in {linked.relative_to(ROOT)}"
    return None


def test_the_slug_is_githubs():
    assert slug("Presenting: replay, lecture-hall view, export") == "presenting-replay-lecture-hall-view-export"
    assert slug("The run record (JSON)") == "the-run-record-json"
    assert slug("How `best` was chosen") == "how-best-was-chosen"


def test_the_reading_finds_links_and_reports_broken_ones(tmp_path):
    probe = tmp_path / "probe.md"
    probe.write_text("See [the\nmetrics](docs/metrics.md#nowhere) and `[code](x.md)`.\n"
                     "```\n[in a block](y.md)\n```\n![a picture](z.png) [a site](https://example.org)\n")
    assert list(relative_links(probe)) == [(1, "docs/metrics.md#nowhere"), (6, "z.png")]
    readme = ROOT / "README.md"
    assert "no heading" in broken(readme, "docs/metrics.md#nowhere")
    assert "no file" in broken(readme, "docs/nowhere.md")
    assert broken(readme, "docs/metrics.md#what-the-numbers-mean") is None


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_a_heading(path):
    problems = [f"line {n}: {why}" for n, target in relative_links(path) if (why := broken(path, target))]
    assert not problems, f"{path.relative_to(ROOT)} has broken links:\n" + "\n".join(problems)


def test_the_readme_is_a_front_door():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MOST_BYTES, f"README.md is {size} bytes; the reference belongs in docs/"
