"""app/request.py: every handler that runs a model enters through the same checks. A draft variant
or target kernel that this device is not offered is refused by each of them with the same line,
before a pair is taken or a run is built, and the page stays up (the refusal is shown, not raised)."""

from __future__ import annotations

import pytest

from app import live, stepping, theory_run
from app.client import status_line
from app.components import StopFlag
from app.step_panel import StepSession
from app.theory import TheorySession
from specdec.engines import ours
from specdec.kernels import w8a8_build
from specdec.serving import pairs

pytestmark = pytest.mark.usefixtures("fp32_store")  # tests/conftest.py

WHY = "this CPU lacks the instructions the kernel needs"  # the reason given for w8a8 on this test's device


def values_of(page, **overrides) -> dict:
    values = {page.prompt: "def add(a, b):", page.pair: "tiny-random", page.drafter: "model", page.k: 4,
              page.adaptive: False, page.temperature: 0, page.top_p: 1, page.top_k: 0, page.max_new: 16,
              page.seed: 0, page.compare: True, page.show_rejected: True, page.draft_variant: "bf16",
              page.plain_int4: False, page.cost_k: False, page.stop: StopFlag(), page.target_kernel: "bf16",
              page.runner: "eager", page.engine: "specdec", page.spec_url: "", page.plain_url: "",
              page.step_state: StepSession(), page.theory_state: TheorySession()}
    values.update({getattr(page, k): v for k, v in overrides.items()})
    return values


def no_progress(*args, **kwargs):
    pass


def first(updates) -> dict:
    """What a handler shows first: its return value, or the first frame it yields."""
    return updates if isinstance(updates, dict) else next(iter(updates))


HANDLERS = {  # name -> (call, the status component it writes)
    "Generate": (lambda page, values: live.live_run(page, values, no_progress), "status"),
    "Step": (lambda page, values: stepping.step(page, values, no_progress), "status"),
    "Run to end": (lambda page, values: stepping.run_to_end(page, values, no_progress), "status"),
    "Sweep K": (lambda page, values: theory_run.sweep(page, values, no_progress), "theory_status"),
}


@pytest.fixture
def w8a8_not_offered(monkeypatch):
    """This device is not offered w8a8 (its kernel cannot run here), and nothing may be built or taken."""
    monkeypatch.setattr(w8a8_build, "unavailable_reason", lambda device=None: WHY)

    def no_run(*args, **kwargs):
        raise AssertionError("a refused request built a run")

    def no_pair(*args, **kwargs):
        raise AssertionError("a refused request took a pair")

    monkeypatch.setattr(ours, "build_decoding", no_run)
    monkeypatch.setattr(pairs.shared_store(), "acquire", no_pair)


def read(updates: dict, page, status: str) -> str:
    """The line a handler showed: the run's status line is HTML (its one line read back), the theory tab's is text."""
    shown = updates[getattr(page, status)]
    return status_line(shown) if status == "status" else shown


@pytest.mark.parametrize("field, name", [("target_kernel", "w8a8"), ("draft_variant", "w8a8-v32k")])
def test_every_handler_refuses_what_this_device_is_not_offered_with_the_same_line(page, w8a8_not_offered, field, name):
    shown = {}
    for handler, (call, status) in HANDLERS.items():
        updates = first(call(page, values_of(page, **{field: name})))
        assert set(updates) == {getattr(page, status)}, handler  # only the status line: nothing of a run
        shown[handler] = read(updates, page, status)
    expected = f"Not started: {field} '{name}' is not offered on cpu: {WHY}"
    assert set(shown.values()) == {expected}, shown


def test_what_is_offered_passes_the_same_checks(page, monkeypatch):
    """The same request with a kernel this device is offered reaches the run (here, its first step, step 0)."""
    monkeypatch.setattr(w8a8_build, "unavailable_reason", lambda device=None: WHY)
    call, status = HANDLERS["Step"]
    updates = call(page, values_of(page))
    assert read(updates, page, status).startswith("Stepping: step 0")


@pytest.mark.parametrize("handler", ["Step", "Run to end", "Sweep K"])
def test_on_zero_gpu_what_runs_in_this_process_is_refused(page, w8a8_not_offered, monkeypatch, handler):
    """Their buttons are off on ZeroGPU; a request sent through the API is refused the same way."""
    from specdec.serving import gpu_budget

    monkeypatch.setattr(gpu_budget, "on_zero_gpu", lambda *args: True)
    call, status = HANDLERS[handler]
    shown = read(first(call(page, values_of(page))), page, status)
    assert shown.startswith("Not started: ") and "is off on ZeroGPU: it runs the models in this process" in shown
