"""llama-server's token stream cut into verify steps by its draft counters (see llamacpp.py).

Tokens arrive one per chunk with the server's cumulative counters (draft_n, draft_n_accepted). A
token whose counters differ from those at the start of the current step opens a new step of
(accepted + 1) tokens; a token with unchanged counters after a complete step is a step that drafted
nothing. A token whose id is not known yet (held back by the server, filled in later) is None; the
steps from the first such token on wait until it is filled.
"""

from __future__ import annotations

from typing import Iterator

from specdec.engines.base import EngineError

Step = tuple  # (ids, drafted, accepted, elapsed_s): what StepAssembler.event takes for one step


class StepCutter:
    def __init__(self, where: str, eos_ids: frozenset[int], max_new_tokens: int):
        self.where = where  # "llama.cpp at URL", for messages
        self.eos_ids = eos_ids
        self.max_new_tokens = max_new_tokens
        self.seen = (0, 0)  # the counters at the start of the current step
        self.step: list[int | None] = []  # ids received of the current step
        self.drafted = self.accepted = 0  # the current step's share of the counters
        self.done: list[list] = []  # complete steps not yet handed out: [ids, drafted, accepted, elapsed]
        self.ids: list[int | None] = []  # every token of the run so far, in order
        self.elapsed = 0.0  # the client's clock at the latest chunk

    def add(self, tokens: list[int | None], counters: tuple[int, int], elapsed: float, held: int = 0) -> None:
        """Tokens that arrived in one chunk under these counters. The first `held` of them were held
        back by the server (half a UTF-8 character) and came with a later token, so the chunk's
        counters may be newer than theirs: a held token first completes the step it belongs to, and
        the run's first token is the prompt pass's whatever the counters say. Held tokens that
        spanned more than one new step cannot be told apart by the counters (they add up): the
        first new step gets them all, and the tokens beyond it count as steps that drafted nothing."""
        self.elapsed = elapsed
        for i, token in enumerate(tokens):
            if i < held and (self.step or not self.ids):  # still the open step's, or the prompt pass's
                self._continue()
            elif counters != self.seen and not self.step:  # the counters moved: a verify step starts with this token
                self.drafted, self.accepted = counters[0] - self.seen[0], counters[1] - self.seen[1]
                self.seen = counters
            elif counters != self.seen:  # llama-server never continues after a step it cut short
                raise EngineError(f"{self.where}: a step of {len(self.step)} tokens was followed by another "
                                  f"before its {self.accepted + 1}")
            else:
                self._continue()
            self.ids.append(token)
            self.step.append(token)
            if len(self.step) == self.accepted + 1 or token in self.eos_ids or len(self.ids) >= self.max_new_tokens:
                self.done.append([self.step, self.drafted, self.accepted, elapsed])
                self.step = []

    def _continue(self) -> None:
        """The next token belongs to the open step, or, with none open, to one that drafted nothing."""
        if not self.step:  # nothing drafted: one token from one target pass
            self.drafted = self.accepted = 0

    def ready(self) -> Iterator[Step]:
        """Complete steps whose ids are all known, in order, each handed out once."""
        while self.done and None not in self.done[0][0]:
            yield tuple(self.done.pop(0))

    def close(self) -> list[list]:
        """At the end of the stream: every step not handed out yet, a step the stream ended inside
        included (a stop the server found that we do not look for)."""
        if self.step:
            self.done.append([self.step, self.drafted, self.accepted, self.elapsed])
            self.step = []
        return self.done

    @property
    def received(self) -> int:
        return len(self.ids)

    def known_prefix(self) -> list[int]:
        """The run's ids up to its first unknown one: what a continuation to fill the rest follows."""
        return self.ids[: self.ids.index(None)] if None in self.ids else list(self.ids)


def fill(held: list[list], every: list[int]) -> None:
    """Put unknown ids in place from `every`, the ids of the run's last len(every) tokens."""
    start = sum(len(ids) for ids, *_ in held) - len(every)  # where `every` begins among the held tokens
    position = 0
    for ids, *_ in held:
        for i in range(len(ids)):
            if ids[i] is None and position >= start:
                ids[i] = every[position - start]
            position += 1
