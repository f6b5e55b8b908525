"""The ids of tokens llama-server held back because they end half a UTF-8 character.

llama-server sends a chunk only when its text so far is whole UTF-8: a token that stops inside a
character (an emoji is often two or three tokens, a rarer CJK character two) gets no chunk, and the
next chunk carries the text of all of them with the id of the last one only. The gap shows in the
chunk's position (tokens_predicted); the held tokens' bytes are that chunk's text less the bytes of
its own token. This module splits those bytes back into tokens of the tokenizer's vocabulary.

First choice: the tokenizer's own encoding of the chunk's text, when it ends with the chunk's token
and has the right count (what a model trained on that encoding emits). Otherwise any split of the
held bytes into that many vocabulary tokens, longest pieces first. Either way the recovered tokens
decode to exactly the server's text; only a model that spelt a character in an unusual split could
have used other ids for it.
"""

from __future__ import annotations


def byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-ins (GPT-2, Qwen, Llama 3): character -> the byte it stands for.
    Printable Latin-1 bytes stand for themselves; the other 68 are shifted past 255, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    shifted = (b for b in range(256) if b not in set(printable))
    table |= {chr(256 + n): b for n, b in enumerate(shifted)}
    return table


class HeldTokens:
    """Recovers held-back ids for one tokenizer (its byte table is built on first need, about 0.5 s)."""

    MAX_SPLITS = 64  # candidate splits looked at before giving up; held bytes are a few characters at most

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._by_bytes: dict[bytes, int] | None = None
        self._bytes_of: dict[int, bytes] | None = None

    def recover(self, text: str, last_id: int, missing: int) -> list[int] | None:
        """The `missing` ids sent before `last_id` in the chunk whose text is `text`; None when this
        tokenizer cannot tell (no vocabulary to read, or no split fits)."""
        if missing < 1:
            return []
        encoded = self._encode(text)
        if encoded is not None and len(encoded) == missing + 1 and encoded[-1] == last_id:
            return encoded[:-1]
        if not self._load_table():
            return None
        whole, tail = text.encode("utf-8"), self._bytes_of.get(last_id)
        if tail is None or not whole.endswith(tail) or len(whole) == len(tail):
            return None
        return self._split(whole[: len(whole) - len(tail)], missing)

    def _encode(self, text: str) -> list[int] | None:
        try:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        except (TypeError, KeyError, AttributeError):  # a tokenizer that cannot encode (test stand-ins)
            return None

    def _load_table(self) -> bool:
        if self._by_bytes is not None:
            return bool(self._by_bytes)
        self._by_bytes, self._bytes_of = {}, {}
        to_tokens = getattr(self.tokenizer, "convert_ids_to_tokens", None)
        if to_tokens is None or not hasattr(self.tokenizer, "get_vocab"):
            return False
        alphabet, special = byte_level_alphabet(), set(getattr(self.tokenizer, "all_special_ids", ()))
        for token, token_id in self.tokenizer.get_vocab().items():
            raw = token_bytes(token, alphabet)
            if raw is not None and token_id not in special:
                self._bytes_of[token_id] = raw
                self._by_bytes.setdefault(raw, token_id)
        return bool(self._by_bytes)

    def _split(self, held: bytes, count: int) -> list[int] | None:
        """Ids of `count` vocabulary tokens whose bytes joined are `held` (longest first piece first)."""
        tried = 0

        def split(start: int, left: int) -> list[int] | None:
            nonlocal tried
            if left == 0:
                return [] if start == len(held) else None
            for end in range(len(held) - left + 1, start, -1):  # leave at least a byte for each later token
                tried += 1
                token_id = self._by_bytes.get(held[start:end])
                if token_id is None or tried > self.MAX_SPLITS:
                    continue
                rest = split(end, left - 1)
                if rest is not None:
                    return [token_id, *rest]
            return None

        return split(0, count)


def token_bytes(token: str, alphabet: dict[str, int]) -> bytes | None:
    """The bytes of one vocabulary entry: byte-level BPE's stand-ins, or SentencePiece's <0xNN> byte tokens."""
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        try:
            return bytes([int(token[3:5], 16)])
        except ValueError:
            return None
    if all(c in alphabet for c in token):
        return bytes(alphabet[c] for c in token)
    return None
