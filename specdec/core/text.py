"""Display text for each token, cut from a decode of the whole sequence.

Decoding tokens one at a time breaks characters made of several tokens (UTF-8 bytes) and drops
leading spaces in some tokenizers. Instead each token's piece is the difference between decoding
the sequence with and without it. Only a window of recent tokens is decoded, which gives the same
difference (the window's start is shared by both decodes) at a bounded cost per token.
"""

from __future__ import annotations

WINDOW = 24  # tokens of context decoded before the new ones
REPLACEMENT = "\ufffd"  # what a decoder shows for an incomplete UTF-8 sequence


class TextTracker:
    def __init__(self, tokenizer, context_ids: list[int]):
        self.tokenizer = tokenizer
        self.ids = list(context_ids)  # everything decoded so far: prompt + emitted tokens

    def _stable(self, ids: list[int]) -> str:
        # A trailing replacement character may be half of a character whose next byte has not
        # arrived yet; hold it back until a later token completes (or confirms) it.
        text = self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return text.rstrip(REPLACEMENT)

    def pieces(self, new_ids: list[int]) -> list[str]:
        """Text each of new_ids would add after the current sequence (does not commit them)."""
        start = max(0, len(self.ids) - WINDOW)
        window = self.ids[start:]
        shown = self._stable(window)
        out = []
        for i in range(len(new_ids)):
            text = self._stable(window + new_ids[: i + 1])
            out.append(text[len(shown) :])
            shown = text
        return out

    def commit(self, new_ids: list[int]) -> list[str]:
        """Pieces for new_ids, which become part of the sequence."""
        out = self.pieces(new_ids)
        self.ids.extend(new_ids)
        return out

    def remainder(self) -> str:
        """Characters held back at the end of the sequence (an unfinished multi-byte character)."""
        window = self.ids[max(0, len(self.ids) - WINDOW) :]
        text = self.tokenizer.decode(window, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return text[len(text.rstrip(REPLACEMENT)) :]
