"""Runs of our engine as the tests make them: checked against the event contract, their tokens, their
events without timings; and a local Hugging Face cache entry for loading tests."""

from __future__ import annotations

from specdec.core.events import check_invariants


def run_checked(pair, prompt, config, **kwargs):
    """Run, check the event contract on the whole stream, return the events."""
    from specdec.engines.ours import OurSource

    events = list(OurSource(pair, config).run(prompt, **kwargs))
    check_invariants(events)
    return events


def tokens(events):
    return [t for e in events for t in e.emitted]


def make_hub_cache(root, repo_id: str, files: dict, revision: str = "0" * 40):
    """A local Hugging Face cache entry for `repo_id` in the layout from_pretrained(local_files_only=True)
    reads (models--Org--Name/refs/main, snapshots/<rev>/<file>), each file a symlink to `files[name]`."""
    from pathlib import Path

    repo = Path(root) / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for name, source in files.items():
        (snapshot / name).symlink_to(Path(source).resolve())
    return snapshot


def untimed(events):
    """Events with their timing fields zeroed: what two runs with the same settings must share."""
    from dataclasses import replace

    return [replace(e, draft_s=0.0, verify_s=0.0, elapsed_s=0.0) for e in events]
