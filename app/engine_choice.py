"""Which engine a run is read from: this project's own, or a real engine's server (llama.cpp,
vLLM) whose steps specdec.engines recovers from the counters it reports. What the choice shows,
the button that starts llama.cpp on the embedded pair, and the lanes of a remote run (the
controls are laid out in app/page.py)."""

from __future__ import annotations

import threading

import gradio as gr

from specdec.engines import choice
from specdec.engines.remote import remote_updates
from specdec.core.events import StepEvent

from .lanes import Lane

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


def shown_for(page, engine: str) -> dict:
    """What the Engine choice shows for `engine`: the URL boxes and the start button for a remote
    engine, and the note on what it reports."""
    can = choice.capabilities(engine)
    return {page.engine_urls: gr.update(visible=not can.in_process), page.start_llamacpp: gr.update(visible=can.starts_embedded),
            page.engine_note: NOTE_OURS if can.in_process else NOTE_REMOTE}


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


def remote_lanes(engine: str, spec_url: str, plain_url: str, prompt: str, pair, config, compare: bool):
    """(Lane.SPEC, StepEvent) for each step of the speculative server, then (Lane.PLAIN, StepEvent)
    for the plain server when asked and given: the same lanes as this project's engine streams. Text
    whose steps are not known yet (vLLM reports them when its stream ends) comes as
    (Lane.SPEC_PENDING, PendingText) or (Lane.PLAIN_PENDING, ...), shown uncoloured until the steps arrive."""
    def lane(steps: Lane, pending: Lane, url: str, speculative: bool):
        for item in remote_updates(engine, url, prompt, pair.tokenizer, config, speculative=speculative, chat=pair.chat,
                                   eos_ids=pair.eos_ids):
            yield (steps if isinstance(item, StepEvent) else pending), item

    yield from lane(Lane.SPEC, Lane.SPEC_PENDING, spec_url, True)
    if compare and plain_url:
        yield from lane(Lane.PLAIN, Lane.PLAIN_PENDING, plain_url, False)


def status(engine: str, spec_url: str, plain_url: str, pair, compare: bool) -> tuple[str, str]:
    """The status line of a run on a real engine's servers, and what its disclosure adds."""
    plain = f", plain lane {plain_url}" if compare and plain_url else ", no plain lane (give its URL to compare)"
    return f"{choice.label(engine)} at {spec_url}{plain}", f"Prompt templated and tokens shown with {pair.name}'s tokenizer."
