import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network

import pytest
import torch

from specdec.core.events import check_invariants


@pytest.fixture(autouse=True)
def one_torch_thread(request):
    """Tiny models run on one torch thread. Their ops are too small to split: on 2 cores shared with
    another busy process, a tiny-random run measured 0.1 s on one thread and 2-5 s on two (OpenMP
    threads waiting on each other). Tests of the real pair are marked `all_threads` and keep them."""
    if request.node.get_closest_marker("all_threads"):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
