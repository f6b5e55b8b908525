"""The one chooser: every engine the project reads from, by name, with the words the page shows for
it and what its source can do. Everywhere else asks these capabilities, never the name."""

from __future__ import annotations

from specdec.engines.base import ENGINES, LLAMA_CPP, SPECDEC, VLLM, Capabilities, StepSource

DEFAULT = SPECDEC  # the engine a run is read from unless the visitor chooses another
LABELS = {SPECDEC: "this project's engine", LLAMA_CPP: "a llama.cpp server", VLLM: "a vLLM server"}
REMOTE = tuple(name for name in ENGINES if name != SPECDEC)  # read over HTTP from a server


def check(engine) -> str:
    """`engine` when it names an engine; ValueError naming the choices otherwise."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return engine


def source_class(engine: str) -> type:
    """The class of `engine`'s StepSource (imported when asked: each pulls in its own client)."""
    check(engine)
    if engine == LLAMA_CPP:
        from specdec.engines.llamacpp import LlamaCppSource

        return LlamaCppSource
    if engine == VLLM:
        from specdec.engines.vllm import VllmSource

        return VllmSource
    from specdec.engines.ours import OurSource

    return OurSource


def capabilities(engine: str) -> Capabilities:
    """What `engine`'s source can do, as it declares it."""
    return source_class(engine).capabilities


# What is assumed of an engine this project does not know (a run file written elsewhere): nothing.
NOTHING = Capabilities(in_process=False, follows_settings=False, steps_through=False, sweeps_k=False, reports_p_q=False,
                       lossy_lane=False, own_cost_table=False, starts_embedded=False, side_by_side=False)


def of_events(engine: str) -> Capabilities:
    """What the source that wrote events of StepEvent.engine `engine` can do (NOTHING for a name not known here)."""
    return capabilities(engine) if engine in ENGINES else NOTHING


def label(engine: str) -> str:
    return LABELS[check(engine)]


def server_module(engine: str):
    """The module that starts `engine`'s servers (start_server, PLAIN, SPECULATIVE, check_server)."""
    if engine not in REMOTE:
        raise ValueError(f"engine must be one of {', '.join(REMOTE)} to start a server, got {engine!r}")
    if engine == VLLM:
        from specdec.engines import vllm

        return vllm
    from specdec.engines import llamacpp

    return llamacpp


def remote_source(engine: str, base_url: str, tokenizer, *, speculative: bool, eos_ids=()) -> StepSource:
    """A StepSource reading `engine`'s server at `base_url` (speculative lane, or the plain lane's server)."""
    if engine == LLAMA_CPP:
        from specdec.engines.llamacpp import LlamaCppSource

        return LlamaCppSource(base_url, tokenizer, speculative=speculative, eos_ids=eos_ids)
    if engine == VLLM:
        from specdec.engines.vllm import VllmSource

        return VllmSource(base_url, tokenizer, speculative=speculative)
    known = ", ".join(repr(e) for e in REMOTE)
    raise ValueError(f"engine must be one of {known}, got {engine!r}")
