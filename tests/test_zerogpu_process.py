"""ZeroGPU's two processes, on tiny-random and without a GPU.

The app's process: on a ZeroGPU Space `spaces` patches torch when it is imported. CUDA's low-level
initialisation (`torch._C._cuda_init`) raises, the device queries are answered from its own table,
and a torch function mode entered in the importing thread keeps tensors moved to "cuda" in host
memory until a GPU worker takes them. The app must start, place its pairs and build the page there
without one CUDA call. The test imports the real package (installed from requirements-dev.txt) and
lets it patch torch exactly as on a Space.

The GPU worker: `spaces` forks the app's process and runs the GPU function there on a new thread.
The fork keeps one thread only, so the function's body must need no other (an executor's thread,
the torch thread): it runs here in a forked child and must finish with the parent's events.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Three things a CUDA build of torch has and this CPU build lacks, which `spaces` reads while it patches:
# the CUDA version string (its device table), `torch._C._cuda_init` (which it replaces with a raiser),
# and a picklable `torch.cuda._is_in_bad_fork` (it asks a forked process pool). Given here as a
# CUDA build has them; every initialisation of CUDA is recorded, whichever thread it comes from.
APP_PROCESS = textwrap.dedent("""
    import json, sys, threading, traceback
    import torch

    torch.version.cuda = "12.8"
    cuda_inits = []

    def record(what):
        cuda_inits.append(f"{what} on {threading.current_thread().name}:\\n" + "".join(traceback.format_stack(limit=14)))

    def _cuda_init():
        record("torch._C._cuda_init")
        raise RuntimeError("CUDA initialised in the app's process")

    def _not_in_bad_fork():
        return False

    torch._C._cuda_init = _cuda_init
    torch.cuda._is_in_bad_fork = _not_in_bad_fork
    import spaces  # patches torch as on a ZeroGPU Space
    from spaces.zero.torch import patching

    lazy_init = torch.cuda._lazy_init  # every CUDA call from C++ goes through it first

    def _lazy_init():
        record("torch.cuda._lazy_init")
        return lazy_init()

    torch.cuda._lazy_init = _lazy_init

    import runpy
    app = runpy.run_path("app.py", run_name="zerogpu_app")  # module level: offer, start-up placement, the page
    store, pair = app["store"], app["store"].loaded_pair("tiny-random")

    def visitor():  # what a request does in the app's process before the GPU call, on a Gradio worker thread
        import gradio as gr
        from app import gpu_call
        from app.page import build_page
        from app.settings import check_offered_here, read_live_settings
        from app.page import StopFlag
        from specdec.core.config import GenerationConfig

        with gr.Blocks():
            page = build_page(store.default, pairs=store.offer.names)
        values = {page.prompt: "def f(x):", page.pair: "tiny-random", page.drafter: "model", page.k: 5,
                  page.adaptive: False, page.temperature: 0, page.top_p: 1, page.top_k: 0, page.max_new: 16,
                  page.seed: 0, page.compare: True, page.show_rejected: True, page.draft_variant: "dense-v16k",
                  page.plain_int4: False, page.cost_k: False, page.stop: StopFlag(), page.target_kernel: "dense",
                  page.runner: "eager", page.engine: "specdec", page.spec_url: "", page.plain_url: ""}
        settings = read_live_settings(page, values, store)
        with store.acquire("tiny-random") as held:
            ids = held.encode_prompt("def f(x):", chat=held.chat, max_new_tokens=16)
        seconds = gpu_call.gpu_seconds("tiny-random", ids, settings.config, True)
        refused = []
        for variant in ("int4", "dense"):
            try:
                check_offered_here(GenerationConfig(draft_variant=variant), plain_int4=variant == "dense")
            except ValueError as err:
                refused.append(str(err))
        answers.update(seconds=seconds, refused=refused)

    def visitor_said():  # a failure in the worker thread is reported, not lost with the thread
        try:
            visitor()
        except BaseException:
            import traceback
            answers["error"] = traceback.format_exc()

    answers = {}
    worker = threading.Thread(target=visitor_said, name="gradio-worker")
    worker.start()
    worker.join()
    print(json.dumps({
        "cuda_inits": cuda_inits, "initialized": torch.cuda.is_initialized(), "device": str(pair.device),
        "param_devices": sorted({str(p.device) for p in pair.target.parameters()}),
        "handed_to_spaces": len(patching.cuda_aliases), "variants": sorted(pair.built.drafts),
        "offer": list(store.offer.names), "demo": type(app["demo"]).__name__, **answers,
    }))
""")


@pytest.mark.skipif(importlib.util.find_spec("spaces") is None, reason="`spaces` not installed (pip install -r requirements-dev.txt)")
def test_the_app_starts_under_spaces_patches_without_a_cuda_call(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDEC_")}
    env.update(SPACES_ZERO_GPU="true", SPACES_ZERO_DEVICE_API_URL="http://127.0.0.1:9/never-called",
               ZEROGPU_OFFLOAD_DIR=str(tmp_path / "offload"), SPECDEC_PAIR="tiny-random", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", APP_PROCESS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["cuda_inits"] == [] and not seen["initialized"], "\n".join(seen["cuda_inits"])
    assert seen["device"] == "cuda" and seen["param_devices"] == ["cuda:0"]  # placed on "cuda" as ZeroGPU asks
    assert seen["handed_to_spaces"] > 0  # ... and so held by `spaces` for its GPU workers
    assert {"dense-v16k", "dense-v32k"} <= set(seen["variants"])  # what the GPU is offered, built at start-up
    assert "error" not in seen, seen.get("error")
    assert seen["offer"] == ["tiny-random"] and seen["demo"] == "Blocks"
    assert seen["seconds"] > 0
    assert seen["refused"][0].startswith("draft_variant 'int4' is not offered on cuda: int4 weights run on torch's CPU")
    assert seen["refused"][1].startswith("plain_int4 is not offered on cuda")


WORKER = textwrap.dedent("""
    import contextvars, json, multiprocessing, threading
    from concurrent.futures import ThreadPoolExecutor

    from app import gpu_call
    from specdec.core.config import GenerationConfig
    from specdec.serving import pairs, torch_thread
    from specdec.serving.pairs import Offer, PairStore

    pairs._shared = store = PairStore(Offer("tiny-random", ("tiny-random",)), device="cpu", dtype="fp32")
    pair = store.get("tiny-random")  # loaded on the torch thread, as the app does
    ids = pair.encode_prompt("def f(x):", chat=pair.chat, max_new_tokens=12)  # as the request encodes it
    runs = [(GenerationConfig(max_new_tokens=12, k=3), True), (GenerationConfig(max_new_tokens=12, drafter="auto"), False)]

    def plain_item(lane, item):  # as JSON: a step's emitted ids, the decode step's seconds, the capture's seconds
        if lane == "capture":
            return item.seconds
        return item if lane == "decode_step" else list(item.emitted)

    def body(config, compare):  # the GPU function's own body (no `spaces` here: the decorator is a no-op)
        lanes = gpu_call.stream_events("tiny-random", ids, config, compare)
        return [(lane, plain_item(lane, item)) for lane, item in lanes]

    def through_the_torch_thread(config, compare):  # as live_run iterates it in the app's process
        stream = torch_thread.Stream(gpu_call.stream_events("tiny-random", ids, config, compare), threading.Event())
        stream.join()
        items = []
        while not items or items[-1][0] not in ("done", "error"):
            items += stream.take(timeout=5)
        return [(lane, plain_item(lane, item)) for lane, item in items[:-1]]

    parent = [through_the_torch_thread(*run) for run in runs]
    ctx = multiprocessing.get_context("fork")
    results = ctx.SimpleQueue()

    def worker():  # as `spaces` runs it: in the forked child, on a new thread, in a copy of the context
        with ThreadPoolExecutor(1) as pool:
            results.put([pool.submit(contextvars.copy_context().run, body, *run).result() for run in runs])

    child = ctx.Process(target=worker)
    child.start()
    child.join(timeout=240)
    alive = child.is_alive()
    if alive:
        child.kill()
    got = results.get() if not alive and child.exitcode == 0 else None
    print(json.dumps({"alive": alive, "exitcode": child.exitcode, "parent": parent, "child": got}))
""")


def test_the_gpu_function_body_runs_in_a_forked_child():
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", WORKER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert not seen["alive"] and seen["exitcode"] == 0, "the GPU function's body did not finish in the forked child"
    spec = [[item for lane, item in run if lane == "spec"] for run in seen["child"]]
    assert all(spec) and seen["child"][0] == seen["parent"][0]  # greedy fp32: the same events as in the parent
    assert [lane for lane, _ in seen["child"][1]][-2:] == ["decode_step", "capture"]  # without the comparison, the decode step
    assert spec[1] == [item for lane, item in seen["parent"][1] if lane == "spec"]
