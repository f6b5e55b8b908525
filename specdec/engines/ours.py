"""This project's engine as a StepSource, like llama.cpp's and vLLM's: the loop of specdec.core run
on a pair loaded in this process, with the settings it is given. It can do everything the page
offers, and says so in its Capabilities; callers ask those, never the engine's name.

Runs start here, from text (`run`: templated and encoded once) or from prompt ids already templated
(`decode`, `iter_events`); all go through specdec.engines.assemble.build_decoding, the one builder
of a run, which checks the settings. The lanes a prompt is shown in come from here too: the
speculative run, `plain()` (nothing drafted) and `lossy()` (plain decoding on an int4 target), and
`side_by_side` runs them one after another for `generate` and the bench."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Iterator

from specdec.core.config import GenerationConfig
from specdec.core.decoding import Decoding
from specdec.core.events import StepEvent
from specdec.core.variant_names import DENSE
from specdec.engines.assemble import build_decoding, run_parts
from specdec.engines.base import SPECDEC, Capabilities
from specdec.measure.faithfulness import ForcedPass, forced_pass
from specdec.measure.passcost import PassCosts, time_decode_step
from specdec.measure.side_by_side import RunResult
from specdec.models.prompt import template_prompt

CAPABILITIES = Capabilities(in_process=True, follows_settings=True, steps_through=True, sweeps_k=True, reports_p_q=True,
                            lossy_lane=True, own_cost_table=False, starts_embedded=False, side_by_side=True,
                            forces_tokens=True)


class OurSource:
    """Runs of `pair` with `config` (`stop`: set it to end a run between two steps)."""

    engine = SPECDEC
    capabilities = CAPABILITIES

    def __init__(self, pair, config: GenerationConfig, *, stop: threading.Event | None = None):
        self.pair, self.config, self.stop = pair, config, stop

    def run(self, prompt: str, *, chat: bool | None = None, detailed: bool = False, costs: PassCosts | None = None) -> Decoding:
        """One run of the text `prompt` (templated as the pair's chat setting says, unless `chat` is
        given). ValueError names a bad setting or prompt. detailed: record what the step panel shows
        of each step (the run's `details`), asked for explicitly so a normal run pays nothing for it.
        costs: the cost policy's table (default: measured or read, see build_decoding)."""
        return self.decode(self.encode(prompt, chat=chat), detailed=detailed, costs=costs)

    def encode(self, prompt: str, *, chat: bool | None = None) -> list[int]:
        """The prompt's ids as a run reads them (build_decoding checks they leave room for the run)."""
        return template_prompt(self.pair.tokenizer, prompt, self.pair.chat if chat is None else chat)

    def decode(self, prompt_ids: list[int], *, detailed: bool = False, costs: PassCosts | None = None) -> Decoding:
        """One run of prompt ids already templated and encoded (see run)."""
        return build_decoding(self.pair, prompt_ids, self.config, detailed=detailed, stop=self.stop, costs=costs)

    def iter_events(self, prompt_ids: list[int], max_new_tokens: int) -> Iterator[StepEvent]:
        """StepSource: a run of prompt ids already templated (the prefill happens in the first step)."""
        config = replace(self.config, max_new_tokens=max_new_tokens)
        return iter(build_decoding(self.pair, prompt_ids, config, stop=self.stop))

    def plain(self) -> "OurSource":
        """The baseline: the same engine and settings with nothing drafted (one token per step)."""
        return OurSource(self.pair, plain_config(self.config), stop=self.stop)

    def lossy(self) -> "OurSource":
        """The lossy lane: plain decoding with the same settings on an int4 copy of the target (built
        once per pair, cached on disk), run as loaded: faster, and not the target's text."""
        from specdec.kernels.variants import target_model

        lossy_pair = replace(self.pair, target=target_model(self.pair, "int4"))
        return OurSource(lossy_pair, replace(plain_config(self.config), target_kernel=DENSE), stop=self.stop)

    def side_by_side(self, prompt: str, *, chat: bool | None = None, plain: bool = False, lossy: bool = False) -> RunResult:
        """The run, then (plain) plain decoding and (lossy) the lossy lane, which needs the plain run
        to say where it departs; the prompt is encoded once for all of them. Without a plain run the
        costs are in a one-token target pass timed on the finished run's cache."""
        ids = self.encode(prompt, chat=chat)
        decoding = self.decode(ids)
        spec = list(decoding)
        plain_events = list(self.plain().decode(ids)) if plain or lossy else None
        decode_step_s = None if plain_events is not None else time_decode_step(decoding)
        lossy_events = list(self.lossy().decode(ids)) if lossy else None
        return RunResult.of(self.pair, self.config, spec, plain_events, lossy_events, decode_step_s)

    def forced_predictions(self, prompt_ids: list[int], reference: list[int]) -> list[int]:
        """The target's top-1 next token (on this source's target kernel) after the prompt and each
        prefix of `reference`, from one pass of the eager runner (specdec.measure.faithfulness)."""
        return self.forced_top2(prompt_ids, reference)[0]

    def forced_top2(self, prompt_ids: list[int], reference: list[int]) -> tuple[list[int], list[float]]:
        """forced_predictions, and the gap between the target's best two logits at each position."""
        p = self.forced_pass(prompt_ids, reference)
        return p.predicted, p.margins

    def forced_pass(self, prompt_ids: list[int], reference: list[int]) -> ForcedPass:
        """forced_top2, and the target's log-probabilities over the vocabulary at each position."""
        parts = run_parts(self.pair, replace(plain_config(self.config), runner="eager"))
        target = parts.target.claim(self, len(prompt_ids) + len(reference), ())
        return forced_pass(target, prompt_ids, reference)


def plain_config(config: GenerationConfig) -> GenerationConfig:
    """`config` with nothing drafted: plain decoding on the same target kernel and sampling."""
    return replace(config, drafter="none")
