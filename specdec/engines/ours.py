"""This project's engine as a StepSource, like llama.cpp's and vLLM's: the loop of specdec.core run
on a pair loaded in this process, with the settings it is given. It can do everything the page
offers, and says so in its Capabilities; callers ask those, never the engine's name.

The builder of a run (specdec.engines.assemble: target kernel, draft variant, cost table) is
imported here only; the page, the bench and the theory tab reach our engine through this source."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Iterator

from specdec.core.config import GenerationConfig
from specdec.core.decoding import Decoding
from specdec.core.detail import DetailedDecoding
from specdec.core.events import StepEvent
from specdec.engines.assemble import build_decoding, generate, run_parts
from specdec.engines.base import SPECDEC, Capabilities
from specdec.measure.faithfulness import forced_top2

CAPABILITIES = Capabilities(in_process=True, follows_settings=True, steps_through=True, sweeps_k=True, reports_p_q=True,
                            lossy_lane=True, own_cost_table=False, starts_embedded=False, side_by_side=True,
                            forces_tokens=True)


class OurSource:
    """Runs of `pair` with `config` (`stop`: set it to end a run between two steps)."""

    engine = SPECDEC
    capabilities = CAPABILITIES

    def __init__(self, pair, config: GenerationConfig, *, stop: threading.Event | None = None):
        self.pair, self.config, self.stop = pair, config, stop

    def run(self, prompt: str, **kwargs) -> Decoding:
        """One run of the text `prompt` (templated as the pair's chat setting says, unless `chat` is
        given), validated first: ValueError names a bad setting or prompt. `kwargs`: generate's."""
        return generate(self.pair, prompt, self.config, stop=self.stop, **kwargs)

    def run_detailed(self, prompt: str) -> DetailedDecoding:
        """run, recording what the step panel shows of each step (in the result's `details`): asked
        for explicitly, so a normal run pays nothing for it."""
        return self.run(prompt, decoding=DetailedDecoding)

    def plain(self) -> "OurSource":
        """The baseline: the same engine and settings with nothing drafted (one token per step)."""
        return OurSource(self.pair, plain_config(self.config), stop=self.stop)

    def forced_predictions(self, prompt_ids: list[int], reference: list[int]) -> list[int]:
        """The target's top-1 next token (on this source's target kernel) after the prompt and each
        prefix of `reference`, from one pass of the eager runner (specdec.measure.faithfulness)."""
        return self.forced_top2(prompt_ids, reference)[0]

    def forced_top2(self, prompt_ids: list[int], reference: list[int]) -> tuple[list[int], list[float]]:
        """forced_predictions, and the gap between the target's best two logits at each position."""
        parts = run_parts(self.pair, replace(plain_config(self.config), runner="eager"))
        return forced_top2(parts.target, prompt_ids, reference)

    def iter_events(self, prompt_ids: list[int], max_new_tokens: int) -> Iterator[StepEvent]:
        """StepSource: a run of prompt ids already templated (the prefill happens in the first step)."""
        config = replace(self.config, max_new_tokens=max_new_tokens)
        return iter(build_decoding(self.pair, prompt_ids, config, stop=self.stop))


def plain_config(config: GenerationConfig) -> GenerationConfig:
    """`config` with nothing drafted: plain decoding on the same target kernel and sampling."""
    return replace(config, drafter="none")
