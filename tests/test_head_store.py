"""The stored head (specdec/kernels/head_store.py, head_offer.py): keyed by its target, verified when
read, refused in one line when truncated, damaged or trained for another target."""

import pytest
import torch

from specdec.core.head import HeadRun
from specdec.kernels.head_offer import find_head, head_run, head_weights, target_key
from specdec.kernels.head_store import HeadFileError, build_head, read_head, save_head
from specdec.kernels.quant import quantize
from specdec.train.recipe import Recipe
from specdec.train.trainer import new_head


@pytest.fixture
def stored(tmp_path, tiny_pair):
    head = new_head(tiny_pair.target, Recipe(intermediate=32), seed=0)
    path = save_head(tmp_path / "tiny.safetensors", head, target_key(tiny_pair), {"intermediate": 32}, {"acceptance_by_position": [0.5]})
    return head, path


def test_a_stored_head_reads_back_as_its_int8_weights(stored, tiny_pair):
    head, path = stored
    found = read_head(path, target_key(tiny_pair), tiny_pair.target.config)
    assert found.record["target"]["name"] == "tiny-random" and found.record["figures"]["acceptance_by_position"] == [0.5]
    built = build_head(found, torch.float32)
    for name in ("fc", "q_proj", "down_proj"):
        want = quantize(getattr(head, name).weight.detach(), 8).dequantize()
        assert torch.equal(getattr(built, name).weight, want)
    assert torch.equal(built.norm.weight, head.norm.weight.detach())
    ids = torch.tensor([3, 9, 27, 4])
    feats = tiny_pair.target.model(input_ids=ids[None]).last_hidden_state[0].detach()
    run = head_run(tiny_pair, head_weights(tiny_pair, found))
    ref = HeadRun(head, tiny_pair.target.get_input_embeddings(), tiny_pair.target.get_output_embeddings())
    out, want = run.extend(feats[:3], ids[1:]), ref.extend(feats[:3], ids[1:])
    assert torch.allclose(out, want, atol=0.05 * want.abs().max())  # int8 rows: close, not equal


def test_a_truncated_file_is_refused_with_its_message(stored, tiny_pair):
    _, path = stored
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(HeadFileError, match=r"head file .*tiny\.safetensors is truncated or damaged \(\d+ bytes"):
        read_head(path, target_key(tiny_pair))


def test_a_damaged_file_is_refused(stored, tiny_pair):
    _, path = stored
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # inside the tensors: the header still parses
    path.write_bytes(bytes(data))
    with pytest.raises(HeadFileError, match="is damaged: its tensors do not match"):
        read_head(path, target_key(tiny_pair))


def test_a_head_for_another_target_is_refused_by_name(stored, tiny_pair):
    _, path = stored
    other = {**target_key(tiny_pair), "name": "qwen2.5-coder-1.5b-instruct-q4_k_m", "weights_sha256": "cc324af0" + "0" * 56}
    with pytest.raises(HeadFileError) as err:
        read_head(path, other)
    message = str(err.value)
    assert "was trained for target 'tiny-random'" in message and "not for 'qwen2.5-coder-1.5b-instruct-q4_k_m'" in message
    assert "\n" not in message


def test_a_head_shaped_for_another_target_is_refused(stored, tiny_pair):
    _, path = stored
    config = type(tiny_pair.target.config)(**{**tiny_pair.target.config.to_dict(), "num_key_value_heads": 4})
    with pytest.raises(HeadFileError, match="shaped for another target: kv_heads 2 vs 4"):
        read_head(path, target_key(tiny_pair), config)


def test_find_head_skips_refused_files_and_says_why(stored, tiny_pair, tmp_path):
    _, good = stored
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(good.read_bytes()[:100])
    offer = find_head(tiny_pair, [tmp_path / "missing.safetensors", bad, good])
    assert offer.stored is not None and offer.stored.path == good
    assert len(offer.refused) == 1 and "bad.safetensors is truncated" in offer.refused[0]
    none = find_head(tiny_pair, [bad])
    assert none.stored is None and "bad.safetensors is truncated" in none.reason
    assert "train one" in find_head(tiny_pair, []).reason


def test_the_head_runs_on_the_w8a8_kernel(stored, tiny_pair):
    from specdec.kernels import w8a8_build

    try:
        w8a8_build.require(tiny_pair.device)
    except ValueError as err:
        pytest.skip(str(err))
    _, path = stored
    found = read_head(path, target_key(tiny_pair))
    dense, w8a8 = build_head(found, torch.float32), build_head(found, torch.float32, kernel="w8a8")
    assert type(w8a8.fc).__name__ == "W8A8Linear"
    ids = torch.tensor([5, 6, 7, 8, 9])
    feats = tiny_pair.target.model(input_ids=ids[None]).last_hidden_state[0].detach()
    embed, lm = tiny_pair.target.get_input_embeddings(), tiny_pair.target.get_output_embeddings()
    a = HeadRun(dense, embed, lm).extend(feats[:4], ids[1:])
    b = HeadRun(w8a8, embed, lm).extend(feats[:4], ids[1:])
    assert torch.allclose(a, b, atol=0.1 * a.abs().max())


def test_a_counted_vocabulary_is_kept_in_the_file_and_the_head_drafts_from_it(tiny_pair, tmp_path):
    from specdec.kernels.head_offer import drafting_ids, subset_lm_head

    head = new_head(tiny_pair.target, Recipe(intermediate=32), seed=0)
    key, config = target_key(tiny_pair), tiny_pair.target.config
    path = save_head(tmp_path / "v.safetensors", head, key, {"intermediate": 32}, {}, ids=torch.tensor([7, 1, 5, 3]))
    found = read_head(path, key, config)
    assert found.ids.tolist() == [1, 3, 5, 7] and found.record["recipe"]["vocab_ids"] == 4
    ids = drafting_ids(tiny_pair, found)
    run = head_run(tiny_pair, head_weights(tiny_pair, found), subset_lm_head(tiny_pair, ids))
    feats = tiny_pair.target.model(input_ids=torch.tensor([[3, 9, 27]])).last_hidden_state[0].detach()
    logits = run.logits(run.extend(feats[:2], torch.tensor([9, 27])))
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [1, 3, 5, 7]
    other = subset_lm_head(tiny_pair, torch.tensor([0, 2, 4, 6]))  # same size, other rows: not the cached ones
    assert torch.isfinite(other(feats[:1])[0]).nonzero().flatten().tolist() == [0, 2, 4, 6]


@pytest.mark.parametrize("ids, says", [
    (torch.tensor([1, 3, 5]), "3 ids, and its record says 4"),
    (torch.tensor([3, 1, 5, 7]), "not sorted and distinct"),
    (torch.tensor([1, 3, 3, 7]), "not sorted and distinct"),
    (torch.tensor([1, 3, 5, 10**6]), "outside the target's vocabulary"),
    (torch.tensor([[1, 3], [5, 7]]), "not a row of token ids"),
])
def test_a_file_whose_vocabulary_does_not_match_its_record_is_refused(tiny_pair, tmp_path, ids, says):
    from specdec.kernels.head_store import head_tensors, write_head

    head = new_head(tiny_pair.target, Recipe(intermediate=32), seed=0)
    key = target_key(tiny_pair)
    path = write_head(tmp_path / "bad.safetensors", {**head_tensors(head), "vocab_ids": ids}, key, head.shape.as_dict(),
                      {"intermediate": 32, "vocab_ids": 4}, {})  # a whole file with a true digest: only the vocabulary is wrong
    with pytest.raises(HeadFileError, match=f"vocabulary that does not match its record: .*{says}"):
        read_head(path, key, tiny_pair.target.config)
