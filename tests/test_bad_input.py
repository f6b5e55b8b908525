"""Bad input gives a ValueError naming the field (CLI: exit 2 and one line), never a torch trace."""

import pytest

from specdec.__main__ import main
from specdec.core.config import MAX_NEW_TOKENS_CAP, GenerationConfig
from specdec.engines.ours import OurSource
from specdec.models.pair import load_pair


@pytest.mark.parametrize("field, value", [
    ("k", 0), ("k", 33), ("temperature", -0.1), ("top_p", 0.0), ("top_p", 1.5), ("top_k", -1),
    ("max_new_tokens", 0), ("max_new_tokens", MAX_NEW_TOKENS_CAP + 1), ("drafter", "oracle"),
    ("draft_confidence", 1.0), ("k_policy", "best"),
])
def test_config_field_out_of_range(field, value):
    with pytest.raises(ValueError, match=field):
        GenerationConfig(**{field: value}).validate()


def test_the_k_policy_has_one_name():
    """adaptive_k, its older spelling, is read only from old record files (specdec.record.run_file)."""
    with pytest.raises(TypeError, match="adaptive_k"):
        GenerationConfig(**{"adaptive_k": True})


def test_empty_prompt(tiny_pair):
    with pytest.raises(ValueError, match="prompt"):
        OurSource(tiny_pair, GenerationConfig()).run("   ")


def test_prompt_longer_than_context(tiny_pair):
    with pytest.raises(ValueError, match="context of 4096 tokens"):
        OurSource(tiny_pair, GenerationConfig()).run("word " * 5000)


def test_unknown_pair():
    with pytest.raises(ValueError, match="pair must be one of"):
        load_pair("gpt-9/1b")


def test_unknown_path():
    with pytest.raises(ValueError, match="could not load model"):
        load_pair(target="/nonexistent/model-folder")


def test_different_vocabularies_are_refused(tiny_pair, tmp_path):
    from transformers import AutoTokenizer

    from specdec.models.tiny import build_tokenizer

    target_dir, draft_dir = tmp_path / "target", tmp_path / "draft"
    tiny_pair.target.save_pretrained(target_dir)
    tiny_pair.tokenizer.save_pretrained(target_dir)
    tiny_pair.draft.save_pretrained(draft_dir)
    other = build_tokenizer()
    other.add_tokens(["<extra>"])
    other.save_pretrained(draft_dir)
    assert AutoTokenizer.from_pretrained(draft_dir).get_vocab() != tiny_pair.tokenizer.get_vocab()
    with pytest.raises(ValueError, match="different vocabularies"):
        load_pair(target=str(target_dir), draft=str(draft_dir), device="cpu", dtype="fp32")


@pytest.mark.parametrize("args, field", [
    (["--k", "40"], "k"), (["--temperature", "-1"], "temperature"), (["--top-p", "2"], "top_p"),
    (["--max-new-tokens", "0"], "max_new_tokens"), (["--prompt", ""], "prompt"), (["--pair", "nope"], "pair"),
])
def test_cli_exits_2_with_one_line(capsys, args, field):
    base = {"--prompt": "hi", "--pair": "tiny-random"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = ["generate", *[x for kv in base.items() for x in kv]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err and "Traceback" not in err


def test_cli_refuses_adaptive_with_another_k_policy(capsys):
    assert main(["generate", "--pair", "tiny-random", "--prompt", "hi", "--adaptive", "--k-policy", "cost"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--k-policy" in err
