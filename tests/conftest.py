import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network

import pytest
import torch

from specdec.core.events import check_invariants


ALL_THREADS = torch.get_num_threads()


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Tiny models run on one torch thread, module- and session-scoped fixtures included. Their ops
    are too small to split: on 2 cores shared with another busy process, a tiny-random run measured
    0.1 s on one thread and 2-5 s on two (OpenMP threads waiting on each other)."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(ALL_THREADS)


@pytest.fixture(autouse=True)
def all_torch_threads(request):
    """Tests of the real pair, marked `all_threads`, run on all of torch's threads."""
    if not request.node.get_closest_marker("all_threads"):
        yield
        return
    torch.set_num_threads(ALL_THREADS)
    yield
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_pair():
    from specdec.models.pair import load_pair

    # scripts/gpu_check.sh runs the parity tests on a GPU with SPECDEC_TEST_DEVICE=cuda.
    return load_pair("tiny-random", device=os.environ.get("SPECDEC_TEST_DEVICE", "cpu"), dtype="fp32")


@pytest.fixture(scope="module")
def page():
    """The app's page over tiny-random, built once per module (its components, as the handlers take them)."""
    import gradio as gr

    from app.page import build_page

    with gr.Blocks():
        return build_page("tiny-random", pairs=("tiny-random",))


@pytest.fixture
def fp32_store(monkeypatch):
    """The app's shared store holding tiny-random in fp32, whatever the CPU would choose; the pass
    costs these runs measure stay here (other tests assume none were measured)."""
    from specdec.serving import gpu_budget, pairs
    from specdec.serving.pairs import Offer, PairStore

    monkeypatch.setattr(pairs, "_shared", PairStore(Offer("tiny-random", ("tiny-random",)), device="cpu", dtype="fp32"))
    monkeypatch.setattr(gpu_budget, "_costs", {})


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
