"""Display pieces come from decoding the whole sequence: no broken characters, no lost spaces."""

from specdec.core.text import TextTracker
from specdec.models.tiny import build_tokenizer

TEXT = "  indented(x)\n\tGrüße 😀 東京 naïve — done"


def test_pieces_rebuild_text_with_multibyte_characters():
    tok = build_tokenizer()
    ids = tok(TEXT)["input_ids"]
    assert len(ids) > len(TEXT.split())  # several characters really span several tokens
    tracker = TextTracker(tok, tok("start:")["input_ids"])
    pieces = [p for i in ids for p in tracker.commit([i])]
    assert "".join(pieces) == TEXT
    assert not any("\ufffd" in p for p in pieces)
    assert "" in pieces  # the first bytes of the emoji show nothing until it is complete


def test_pieces_do_not_commit():
    tok = build_tokenizer()
    tracker = TextTracker(tok, tok("ab")["input_ids"])
    ids = tok(" cd")["input_ids"]
    assert "".join(tracker.pieces(ids)) == " cd"
    assert "".join(tracker.pieces(ids)) == " cd"
    assert tracker.ids == tok("ab")["input_ids"]


def test_unfinished_character_is_reported_as_remainder():
    tok = build_tokenizer()
    emoji = tok("😀")["input_ids"]
    tracker = TextTracker(tok, tok("a")["input_ids"])
    assert "".join(tracker.commit(emoji[:-1])) == ""
    assert tracker.remainder() == "\ufffd"
