"""Prompt lookup: propose what followed the latest earlier occurrence of the sequence's last n
tokens. Costs no model pass; shines on edits and code that repeats its context."""

from __future__ import annotations

from specdec.core.proposers.base import Draft, nothing


class LookupProposer:
    """Tries n from max_ngram down to min_ngram; the match is found once a step (has_draft and
    propose share it)."""

    name = "lookup"

    def __init__(self, max_ngram: int, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min(min_ngram, max_ngram)  # shorter matches are not trusted
        self._found: tuple[int, int | None] = (-1, None)  # (length of the sequence searched, where its continuation starts)

    def continuation(self, seq: list[int]) -> int | None:
        """Where the tokens that followed the latest match of seq's tail start (None: no match)."""
        if self._found[0] != len(seq):  # the sequence only grows in a run: its length names it
            self._found = (len(seq), find_continuation(seq, self.max_ngram, self.min_ngram))
        return self._found[1]

    def has_draft(self, seq: list[int]) -> bool:
        return self.continuation(seq) is not None

    def unseen(self, seq: list[int]) -> int:
        return 1  # no pass: it reads the sequence itself

    def start(self, run, prompt_length: int, positions: int) -> None:
        pass

    def ready(self, run) -> None:
        pass

    def propose(self, run, seq: list[int], k: int) -> Draft:
        begin = self.continuation(seq)
        if begin is None:
            return nothing(run.device)
        return Draft(run.send(seq[begin : begin + k]), None, self.name)

    def settle(self, run, kept_from: int, accepted: int, length: int) -> None:
        pass

    def close(self, run) -> None:
        pass


def find_continuation(seq: list[int], max_ngram: int, min_ngram: int) -> int | None:
    """The index after the latest earlier occurrence of seq's last n tokens, for the longest n in
    max_ngram..min_ngram that has one (the occurrence must be followed by at least one token)."""
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        tail = seq[-n:]
        # Scan right to left so the most recent match wins (it is the best local predictor).
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start : start + n] == tail:
                return start + n
    return None
