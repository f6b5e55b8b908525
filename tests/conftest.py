import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network

import pytest

from specdec.events import check_invariants


@pytest.fixture(scope="session")
def tiny_pair():
    from specdec.models import load_pair

    # scripts/gpu_check.sh runs the parity tests on a GPU with SPECDEC_TEST_DEVICE=cuda.
    return load_pair("tiny-random", device=os.environ.get("SPECDEC_TEST_DEVICE", "cpu"), dtype="fp32")


def run_checked(pair, prompt, config, **kwargs):
    """Generate, check the event contract on the whole stream, return the events."""
    from specdec.engine import generate

    events = list(generate(pair, prompt, config, **kwargs))
    check_invariants(events)
    return events


def tokens(events):
    return [t for e in events for t in e.emitted]
