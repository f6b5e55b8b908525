import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network

import pytest

from specdec.core.events import check_invariants


@pytest.fixture(scope="session")
def tiny_pair():
    from specdec.models.pair import load_pair

    # scripts/gpu_check.sh runs the parity tests on a GPU with SPECDEC_TEST_DEVICE=cuda.
    return load_pair("tiny-random", device=os.environ.get("SPECDEC_TEST_DEVICE", "cpu"), dtype="fp32")


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
