"""Which engine a run is read from: this project's own, or a real engine's server (llama.cpp,
vLLM) whose steps specdec.engines recovers from the counters it reports. The controls, the button
that starts llama.cpp on the embedded pair, and the lanes of a remote run."""

from __future__ import annotations

import threading

import gradio as gr

from specdec.engines import choice
from specdec.engines.remote import remote_updates
from specdec.core.events import StepEvent

CHOICES = [(choice.LABELS[name], name) for name in choice.LABELS]

NOTE_OURS = ("This project's engine runs both models in this process: every step is known in full (the drafted "
             "tokens, p and q, the seconds of drafting and of the check).")
NOTE_REMOTE = (
    "A real engine is read over HTTP. Give its speculative server and, for the plain lane, a second server of the same "
    "target without a draft (a server started with a draft is not plain decoding, even with drafting switched off per "
    "request: it still runs the draft). Runs are greedy. The engine reports how many tokens it drafted and accepted, not "
    "which it rejected: rejected drafts show as a struck-through count. llama.cpp reports each step as it happens; "
    "vLLM reports its steps when the stream ends, so its text streams uncoloured first. The draft length is the "
    "one the server was started with, not the K slider."
)

_embedded = {}  # "servers": the llama.cpp servers this process started on the embedded pair (one pair of them)
_embedded_lock = threading.Lock()


def section(page) -> None:
    """The Engine choice, under the model settings."""
    with gr.Group(elem_id="engine-settings"):
        page.engine = gr.Radio(CHOICES, value=choice.DEFAULT, label="Engine", elem_id="engine")
        with gr.Row(visible=False, elem_id="engine-urls") as page.engine_urls:
            page.spec_url = gr.Textbox(label="Speculative server (base URL)", placeholder="http://127.0.0.1:8080",
                                       elem_id="spec-url")
            page.plain_url = gr.Textbox(label="Plain server: same target, no draft (base URL)",
                                        placeholder="http://127.0.0.1:8081", elem_id="plain-url")
        page.start_llamacpp = gr.Button("Start llama.cpp on the embedded pair (plain and speculative servers)",
                                        visible=False, size="sm", elem_id="start-llamacpp")
        page.engine_note = gr.Markdown(NOTE_OURS, elem_id="engine-note")


def wire(page) -> None:
    def on_engine(engine):
        can = choice.capabilities(engine)
        return {page.engine_urls: gr.update(visible=not can.in_process), page.start_llamacpp: gr.update(visible=can.starts_embedded),
                page.engine_note: NOTE_OURS if can.in_process else NOTE_REMOTE}

    page.engine.change(on_engine, page.engine, [page.engine_urls, page.start_llamacpp, page.engine_note],
                       concurrency_limit=None)
    page.start_llamacpp.click(start_llamacpp, None, [page.spec_url, page.plain_url, page.engine_note],
                              api_name="start_llamacpp", concurrency_limit=1)


def start_llamacpp(progress=gr.Progress()) -> tuple:
    """Start (once per process) llama-server on the embedded pair's GGUF files, with and without the
    draft, and fill in their addresses. Building llama-server, when it is not built yet, takes minutes."""
    from specdec.engines.remote import start_embedded_llamacpp

    with _embedded_lock:
        try:
            servers = _embedded.get("servers")
            if servers is None:
                servers = start_embedded_llamacpp(progress=lambda f, msg: progress(f, desc=msg))
                _embedded["servers"] = servers
        except Exception as err:  # a build or start failure: one line, the page keeps serving
            message = f"llama.cpp could not be started: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
            gr.Warning(message)
            return gr.update(), gr.update(), message
    return (servers.spec_url, servers.plain_url,
            f"llama.cpp serves the embedded pair's GGUF files here: speculative at {servers.spec_url}, plain at "
            f"{servers.plain_url}. " + NOTE_REMOTE)


def embedded_servers():
    """The llama.cpp servers this process started on the embedded pair, or None."""
    return _embedded.get("servers")


def read_remote(page, values: dict) -> tuple[str, str, str]:
    """(engine, speculative URL, plain URL), checked; ValueError names what is missing."""
    engine = choice.check(values[page.engine])
    spec_url, plain_url = (values[page.spec_url] or "").strip(), (values[page.plain_url] or "").strip()
    can = choice.capabilities(engine)
    if not can.in_process and not spec_url:
        raise ValueError(f"engine {engine}: give the base URL of its speculative server"
                         + (" (or press Start llama.cpp)" if can.starts_embedded else ""))
    return engine, spec_url, plain_url


def require(page, values: dict, what: str, can: str) -> None:
    """`what` needs the chosen engine to have the capability `can` (e.g. "steps_through"); ValueError
    otherwise (a remote engine reports no per-token detail)."""
    if not getattr(choice.capabilities(values.get(page.engine, choice.DEFAULT)), can):
        raise ValueError(f"{what} runs on this project's engine only (a remote engine reports no per-token detail): "
                         "choose it under Engine")


def remote_lanes(engine: str, spec_url: str, plain_url: str, prompt: str, pair, config, compare: bool):
    """("spec", StepEvent) for each step of the speculative server, then ("plain", StepEvent) for the
    plain server when asked and given: the same lanes as this project's engine streams. Text whose
    steps are not known yet (vLLM reports them when its stream ends) comes as ("spec_pending",
    PendingText) or ("plain_pending", ...), shown uncoloured until the steps arrive."""
    def lane(name: str, url: str, speculative: bool):
        for item in remote_updates(engine, url, prompt, pair.tokenizer, config, speculative=speculative, chat=pair.chat,
                                   eos_ids=pair.eos_ids):
            yield (name if isinstance(item, StepEvent) else f"{name}_pending"), item

    yield from lane("spec", spec_url, True)
    if compare and plain_url:
        yield from lane("plain", plain_url, False)


def status(engine: str, spec_url: str, plain_url: str, pair, compare: bool) -> str:
    plain = f", plain lane {plain_url}" if compare and plain_url else ", no plain lane (give its URL to compare)"
    return (f"{choice.label(engine)} at {spec_url}{plain}; prompt templated and tokens shown with "
            f"{pair.name}'s tokenizer")
