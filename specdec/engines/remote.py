"""The page's door to real engines: given an engine's name, a server's address, a prompt and the
settings, yield that server's steps as StepEvents; start the embedded pair's llama.cpp servers.
llama.cpp's steps arrive as they happen; vLLM's all at the end of the run, so `remote_updates`
also yields its text as it streams (PendingText), to show before the steps colour it.

Runs are greedy (temperature 0), the setting in which speculative output must equal plain output.
The draft length is the one the speculative server was started with (llama-server fixes it at
start), not the page's K."""

from __future__ import annotations

from typing import Iterator

from specdec.core.config import GenerationConfig
from specdec.core.events import StepEvent
from specdec.engines.base import EngineError
from specdec.engines.choice import remote_source
from specdec.models.prompt import template_prompt


def remote_events(engine: str, base_url: str, prompt: str, tokenizer, config: GenerationConfig, *,
                  speculative: bool = True, chat: bool = True, eos_ids=()) -> Iterator[StepEvent]:
    """One run on a real engine's server, step by step. `tokenizer`: the pair's (ModelPair.tokenizer),
    which templates the prompt as our engine does and gives each token its text. Raises ValueError
    for settings a remote run cannot honour, EngineError (one line) for a server that cannot be
    reached, answers something else, or has speculation off."""
    for item in remote_updates(engine, base_url, prompt, tokenizer, config, speculative=speculative, chat=chat, eos_ids=eos_ids):
        if isinstance(item, StepEvent):
            yield item


def remote_updates(engine: str, base_url: str, prompt: str, tokenizer, config: GenerationConfig, *,
                   speculative: bool = True, chat: bool = True, eos_ids=()) -> Iterator:
    """remote_events, plus the text of tokens whose steps are not known yet (vLLM:
    specdec.engines.vllm.PendingText, uncoloured text to show until the steps arrive at the end)."""
    if config.temperature != 0:
        raise ValueError(f"temperature must be 0 for a remote engine (greedy runs only), got {config.temperature}")
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base URL must start with http:// or https://, got {base_url!r}")
    source = remote_source(engine, base_url, tokenizer, speculative=speculative, eos_ids=eos_ids)
    prompt_ids = template_prompt(tokenizer, prompt, chat)
    updates = getattr(source, "iter_updates", source.iter_events)
    yield from updates(prompt_ids, config.max_new_tokens)


def start_embedded_llamacpp(k: int = 5, progress=None):
    """Start llama-server twice on the embedded pair (speculative with the draft, plain without);
    returns specdec.engines.llamacpp.EmbeddedServers (spec_url, plain_url, stop())."""
    from specdec.engines.llamacpp import start_embedded_servers

    return start_embedded_servers(k=k, progress=progress)


__all__ = ["EngineError", "remote_events", "remote_updates", "start_embedded_llamacpp"]
