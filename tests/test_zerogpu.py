"""ZeroGPU wiring without ZeroGPU: the GPU function gets a duration computed from its own arguments,
its arguments and results survive pickling (ZeroGPU runs it in a worker process), and on a ZeroGPU
Space a request that could outlast one GPU call is refused with a message naming max_new_tokens."""

from __future__ import annotations

import contextvars
import importlib
import math
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path

import gradio as gr
import pytest

from specdec.serving import gpu_budget
from specdec.serving import pairs
from specdec.core.config import GenerationConfig
from specdec.serving.pairs import Offer, PairStore
from tests.support.live import status_line


@pytest.fixture(autouse=True)
def fresh_budget(monkeypatch):
    """Each test starts from the estimates: a finished run elsewhere would have replaced them."""
    monkeypatch.setattr(gpu_budget, "_costs", {})
    monkeypatch.setattr(gpu_budget, "_captures", {})
    monkeypatch.setattr(gpu_budget, "_fresh_measured", set())


@pytest.fixture
def tiny_store(monkeypatch):
    store = PairStore(Offer("tiny-random", ("tiny-random",)), device="cpu", dtype="fp32")
    monkeypatch.setattr(pairs, "_shared", store)
    return store


@pytest.fixture
def fake_spaces(monkeypatch):
    """A `spaces` module whose GPU decorator records, at each call, the duration asked for and the
    visitor's request as `spaces` reads it: Gradio's context variable, when the generator is first
    iterated (that is when spaces' own wrapper schedules the call)."""
    from gradio.context import LocalContext

    asked, requests = [], []

    def GPU(duration=None, size=None):
        def wrap(fn):
            def call(*args, **kwargs):
                requests.append(LocalContext.request.get(None))
                asked.append(duration(*args, **kwargs))
                yield from fn(*args, **kwargs)
            return call
        return wrap

    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=GPU))
    import app.gpu_call

    yield importlib.reload(app.gpu_call), asked, requests
    monkeypatch.delitem(sys.modules, "spaces")
    importlib.reload(app.gpu_call)


def test_gpu_function_asks_for_its_worst_case(tiny_store, fake_spaces):
    gpu_call, asked, _ = fake_spaces
    pair = tiny_store.get("tiny-random")  # the GPU function finds the pair loaded; it never loads one
    config = GenerationConfig(max_new_tokens=16, k=4)
    ids = pair.encode_prompt("def f(x):", chat=pair.chat, max_new_tokens=16)  # as the request encodes it
    events = list(gpu_call.stream_events("tiny-random", ids, config, True))
    assert asked == [math.ceil(gpu_budget.call_seconds(config, True, gpu_budget.PassCosts()))]
    assert {which for which, _ in events} == {"spec", "plain", "capture"}
    assert events[-1] == ("capture", gpu_budget.CaptureReport(0.0, fresh=True))  # the eager runner captures nothing
    again = list(gpu_call.stream_events("tiny-random", ids, config, False))
    assert again[-1] == ("capture", gpu_budget.CaptureReport(0.0, fresh=False))  # the process's second call: a reused worker
    # What crosses to and from a ZeroGPU worker is pickled.
    assert pickle.loads(pickle.dumps(("tiny-random", ids, config, True)))[1:3] == (ids, config)
    assert pickle.loads(pickle.dumps(events)) == events


def test_the_gpu_function_sees_the_visitors_request(tiny_store, fake_spaces):
    """live_run hands the GPU generator to the torch thread; `spaces` reads the visitor's request
    (whose token decides the quota) from Gradio's context variable there, so the context goes too."""
    from gradio.context import LocalContext

    from app.page import build_page
    from app.live import live_run

    _, asked, requests = fake_spaces
    with gr.Blocks():
        page = build_page("tiny-random", pairs=("tiny-random",))
    visitor = types.SimpleNamespace(headers={"x-ip-token": "visitor-1"})

    def as_visitor():
        LocalContext.request.set(visitor)
        return list(live_run(page, page_values(page, max_new=16), progress=lambda *a, **k: None))

    frames = contextvars.copy_context().run(as_visitor)
    assert status_line(frames[-1][page.status]).startswith("tiny-random: target dense")
    assert requests == [visitor] and len(asked) == 1


def test_the_capture_a_fresh_worker_measured_is_counted_in_the_next_calls_duration(tiny_store, fake_spaces, monkeypatch):
    """The runner's capture seconds come back from the GPU call as the last item. From a reused
    worker (not its process's first call) a 0 leaves the estimate alone: the next call may get a
    fresh worker. From a fresh worker it replaces the estimate: here the static runner, which
    captures nothing (its estimate is not 0)."""
    from app.page import build_page
    from app.live import live_run

    gpu_call, asked, _ = fake_spaces
    with gr.Blocks():
        page = build_page("tiny-random", pairs=("tiny-random",))
    config = GenerationConfig(max_new_tokens=16, k=5, runner="static")
    key = gpu_budget.cost_key("tiny-random", config)
    assert gpu_budget.costs_for(key).capture_s == gpu_budget.CAPTURE_ESTIMATES["static"] > 0
    monkeypatch.setattr(gpu_call, "_calls_here", 3)  # a worker that has served calls before
    list(live_run(page, page_values(page, max_new=16, runner="static"), progress=lambda *a, **k: None))
    assert gpu_budget.costs_for(key).capture_s == gpu_budget.CAPTURE_ESTIMATES["static"]
    monkeypatch.setattr(gpu_call, "_calls_here", 0)  # a fresh worker
    list(live_run(page, page_values(page, max_new=16, runner="static"), progress=lambda *a, **k: None))
    assert gpu_budget.costs_for(key).capture_s == 0.0 and len(asked) == 2


def page_values(page, **changes):
    from app.page import StopFlag

    values = {page.prompt: "def f(x):", page.pair: "tiny-random", page.drafter: "model", page.k: 5, page.adaptive: False,
              page.temperature: 0, page.top_p: 1, page.top_k: 0, page.max_new: 1024, page.seed: 0, page.compare: True,
              page.show_rejected: True, page.draft_variant: "dense", page.plain_int4: False, page.cost_k: False,
              page.stop: StopFlag(), page.target_kernel: "dense", page.runner: "eager", page.engine: "specdec", page.spec_url: "", page.plain_url: ""}
    return values | {getattr(page, k): v for k, v in changes.items()}


def test_zerogpu_refuses_a_run_that_could_outlast_the_call(tiny_store, monkeypatch):
    from app.page import build_page
    from app.live import live_run
    from app.ui import max_new_tokens_cap

    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    with gr.Blocks():
        page = build_page("tiny-random", pairs=("tiny-random",))
    frames = list(live_run(page, page_values(page), progress=lambda *a, **k: None))
    status = status_line(frames[-1][page.status])
    assert status.startswith("Not started: max_new_tokens=1024 could need up to") and "at most 183 new tokens fit" in status
    cap = max_new_tokens_cap()
    assert cap == 176  # the slider ends where the default settings still fit
    gpu_budget.check_fits(GenerationConfig(max_new_tokens=cap, k=5), True, gpu_budget.PassCosts(), 60)
    frames = list(live_run(page, page_values(page, max_new=16), progress=lambda *a, **k: None))
    assert status_line(frames[-1][page.status]).startswith("tiny-random: target dense")
    monkeypatch.delenv("SPACES_ZERO_GPU")
    assert max_new_tokens_cap() == 1024



def test_app_imports_spaces_before_torch(tmp_path):
    """ZeroGPU refuses to start when CUDA was touched before `spaces` was imported, and the pair would
    land on the CPU: app.py imports it first."""
    fake = tmp_path / "spaces"
    fake.mkdir()
    (fake / "__init__.py").write_text("import sys\nTORCH_FIRST = 'torch' in sys.modules\n"
                                      "def GPU(duration=None, size=None):\n    return lambda fn: fn\n")
    root = Path(__file__).resolve().parent.parent
    code = "import runpy; runpy.run_path('app.py', run_name='imported'); import spaces; print(spaces.TORCH_FIRST)"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{root}", SPECDEC_PAIR="tiny-random", SPECDEC_PAIRS="tiny-random")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
