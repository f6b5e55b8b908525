"""The one way in for every handler that runs a model (Generate, Step, Run to end, Sweep K): the same
checks in the same order, so that no handler can skip one.

`admitted` reads the settings and checks them (app/settings.read_live_settings: the values, what the
chosen engine can do and what this handler needs of it, the pair offered here, the variant, kernel
and lane offered on this device, the ZeroGPU budget), then acquires the pair, encodes the prompt
(once: every run of the request starts from these ids) and refuses a head the pair does not have.
A refusal is a ValueError; `refusal` turns it into the status line the handler shows, so the page
stays up.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import gradio as gr

from specdec.core.config import GenerationConfig
from specdec.models.pair import ModelPair
from specdec.serving.pairs import shared_store

from .settings import Handler, LiveSettings, read_live_settings


@dataclass(frozen=True)
class Admitted:
    """A request that passed every check, with its pair held."""

    settings: LiveSettings
    pair: ModelPair  # acquired from the shared store for as long as the request runs
    prompt: str
    prompt_ids: list[int]  # the prompt templated and encoded, room for max_new_tokens checked

    @property
    def config(self) -> GenerationConfig:
        return self.settings.config


@contextmanager
def admitted(page, values: dict, progress: gr.Progress, handler: Handler) -> Iterator[Admitted]:
    """The request's checks, then its pair held while the body runs; ValueError names what refused it."""
    store = shared_store()
    settings = read_live_settings(page, values, store, handler)
    with store.acquire(settings.pair_name, progress=lambda f, msg: progress(f, desc=msg)) as pair:
        prompt = values[page.prompt]
        prompt_ids = pair.encode_prompt(prompt, chat=pair.chat, max_new_tokens=settings.config.max_new_tokens)
        if settings.config.uses_head:
            head_label(pair, settings.config)  # a pair without a verified head: refused here, with the reason
        yield Admitted(settings, pair, prompt, prompt_ids)


def refusal(err: ValueError) -> str:
    """What a refused request shows: a toast, and this line (in the status line, or the theory tab's)."""
    gr.Warning(str(err))
    return f"Not started: {err}"


def head_label(pair, config: GenerationConfig) -> str:
    """Which head file drafts, and how its products run (specdec.engines.assemble); ValueError with
    the reason when the loaded pair has no verified head (head_offer.require_head)."""
    from specdec.engines.assemble import head_kernel
    from specdec.kernels.head_offer import require_head

    return f"{require_head(pair).path.name}, {head_kernel(config.target_kernel)} products"
