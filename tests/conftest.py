import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network

import pytest
import torch

# Fixtures that several modules share, defined with the code they drive, and the durations file (tests/support/).
pytest_plugins = ("tests.support.browser", "tests.support.durations", "tests.support.llamacpp")


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


