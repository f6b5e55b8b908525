"""Training the head (specdec/train/): a tiny head learns, resumes where it stopped, is reproducible;
the validation figures by draft position; the training prompts never include the measured ones."""

import json
from pathlib import Path

import pytest
import torch

from specdec.kernels.head_store import read_head
from specdec.train.objective import position_counts
from specdec.train.recipe import Plan, Recipe

ROOT = Path(__file__).resolve().parent.parent
TINY = Recipe(intermediate=32, window=48, batch_positions=192, val_answers=4, answer_batch=4, answer_tokens=16,
              chunk=48, val_chunks=3, eval_depth=3, lr=3e-3)


@pytest.fixture(scope="module")
def text_root(tmp_path_factory):
    """A few files of this project's own source stand in for the installed packages (fast, the same everywhere)."""
    root = tmp_path_factory.mktemp("text")
    for path in sorted((ROOT / "specdec" / "core").glob("*.py"))[:6]:
        (root / path.name).write_text(path.read_text())
    return root


def run(tiny_pair, text_root, work, out, steps=24, **plan):
    from specdec.train.run import train

    plan = {"seed": 0, "answers": 8, "code_tokens": 600, "steps": steps, **plan}
    return train(tiny_pair, TINY, Plan(**plan), work, out, bars=False, root=text_root)


def interrupt_after(steps: int, monkeypatch, start) -> None:
    """Call `start` (a training run) with its optimizer interrupted after `steps` steps, as Ctrl-C would."""
    from specdec.train import trainer

    real_step, calls = trainer.Trainer.step, []

    def interrupted(self, batch, lr):
        calls.append(lr)
        if len(calls) > steps:
            raise KeyboardInterrupt
        return real_step(self, batch, lr)

    monkeypatch.setattr(trainer.Trainer, "step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        start()


def test_a_tiny_head_trains_and_its_validation_loss_falls(tiny_pair, text_root, tmp_path):
    figures = run(tiny_pair, text_root, tmp_path / "work", tmp_path / "head.safetensors")
    curve = figures["curve"]
    assert curve[0]["step"] == 0 and curve[-1]["step"] == 24
    assert curve[-1]["loss"] < curve[0]["loss"] - 0.05, [p["loss"] for p in curve]
    assert len(figures["acceptance_by_position"]) == TINY.eval_depth and figures["val_answer_drafts"] > 0
    stored = read_head(tmp_path / "head.safetensors")
    assert stored.record["recipe"]["steps"] == 24 and stored.record["figures"]["train_tokens"] > 0
    # the vocabulary is counted from the training data (never the held-out) and kept in the file
    from specdec.train.data import load_split
    from specdec.train.vocabulary import training_vocabulary

    counted = training_vocabulary(tiny_pair, load_split(tmp_path / "work", "train"), TINY.vocab)
    assert stored.ids is not None and torch.equal(stored.ids, counted)
    walk = figures["walk"]
    assert walk["steps"] > 0 and walk["k"] == TINY.eval_depth and 1 <= len(walk["rates"]) <= walk["k"] and "walk" in figures["read_text"]


def test_training_resumes_after_an_interruption_and_a_seed_reproduces_it(tiny_pair, text_root, tmp_path, monkeypatch):
    """Stopped after step 13 (checkpoints every 3 steps here), run again: the head equals an uninterrupted run's."""
    from specdec.train import trainer

    whole = tmp_path / "whole.safetensors"
    run(tiny_pair, text_root, tmp_path / "a", whole)
    real_step = trainer.Trainer.step
    interrupt_after(13, monkeypatch, lambda: run(tiny_pair, text_root, tmp_path / "b", tmp_path / "b.safetensors"))
    saved = json.loads((tmp_path / "b" / "plan.json").read_text())
    assert saved["plan"]["steps"] == 24 and (tmp_path / "b" / "checkpoint.pt").exists()
    monkeypatch.setattr(trainer.Trainer, "step", real_step)
    again = run(tiny_pair, text_root, tmp_path / "b", tmp_path / "b.safetensors")
    assert again["steps"] == 24
    a, b = read_head(whole), read_head(tmp_path / "b.safetensors")
    assert a.record["tensors_sha256"] == b.record["tensors_sha256"]
    with pytest.raises(ValueError, match="planned with answers=8, and 9 was given"):
        run(tiny_pair, text_root, tmp_path / "b", tmp_path / "c.safetensors", answers=9)


def test_a_resumed_run_may_be_given_another_total_of_steps_and_the_head_file_says_so(tiny_pair, text_root, tmp_path, monkeypatch):
    """Planned for 24 steps, stopped after 13, resumed with 18: it ends at 18 and records the change."""
    from specdec.train import trainer

    real_step = trainer.Trainer.step
    interrupt_after(13, monkeypatch, lambda: run(tiny_pair, text_root, tmp_path / "w", tmp_path / "h.safetensors"))
    saved = torch.load(tmp_path / "w" / "checkpoint.pt", weights_only=False)["step"]
    resumed = []
    monkeypatch.setattr(trainer.Trainer, "step", lambda self, batch, lr: resumed.append(lr) or real_step(self, batch, lr))
    figures = run(tiny_pair, text_root, tmp_path / "w", tmp_path / "h.safetensors", steps=18)
    assert figures["steps"] == 18 and len(resumed) == 18 - saved  # from the checkpoint to the new total
    assert resumed == [pytest.approx(trainer.learning_rate(TINY, s, 18)) for s in range(saved, 18)]  # the new total's schedule
    record = read_head(tmp_path / "h.safetensors").record["recipe"]
    assert record["steps"] == 18 and record["replanned"][0]["steps_from"] == 24 and record["replanned"][0]["steps_to"] == 18


def test_acceptance_by_position_on_hand_made_drafts():
    """Four starts, K = 3. Position k is tested only after 1..k-1 were accepted and the text went on
    as the target would have; agreement counts wherever the position exists."""
    draft = torch.tensor([[1, 2, 3], [1, 9, 3], [1, 2, 3], [7, 2, 3]])
    target = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 2, 4], [1, 2, 3]])
    followed = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 1], [1, 1, 1]], dtype=torch.bool)
    available = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    c = position_counts(draft, target, followed, available)
    assert c.tested.tolist() == [4, 3, 1]  # start 3 fails at 1; start 2's text left the target's after 2
    assert c.accepted.tolist() == [3, 2, 1]
    assert c.agree.tolist() == [3, 3, 2] and c.measured.tolist() == [4, 4, 3]
    assert c.acceptance == [0.75, 2 / 3, 1.0]
    assert c.mean_accepted == pytest.approx((3 + 2 + 1) / 4)


def project_material():
    """Version 2's material from this project's own sources and docs (the same on every machine)."""
    from specdec.train.prompt_material import Material

    material = Material()
    for path in [*sorted((ROOT / "specdec" / "train").glob("*.py")), ROOT / "docs" / "head.md"]:
        material.add(path.name, path.read_text())
    return material


@pytest.mark.parametrize("version", [1, 2])
def test_the_written_prompts_never_include_the_measured_ones(version):
    from specdec.train.prompts import written_prompts

    measured = [p["prompt"] for name in ("bench_prompts.json", "examples.json", "heldout_prompts.json")
                for p in json.loads((ROOT / "assets" / name).read_text())]
    code = "def total(values):\n    s = 0\n    for v in values:\n        s += v\n    return s\n"
    written = written_prompts(0, 3000, [code], version, project_material())
    assert len(written) == 3000 and len(set(written)) == 3000
    for m in measured:
        assert all(m not in w and w not in m for w in written)
    marks = ["merge_intervals", "hash table", "customers(id", "sales(id", "Ada Lovelace", "The build failed because", "train leaves"]
    assert not [w for w in written if any(mark in w for mark in marks)]


def test_version_1_of_the_written_prompts_is_what_the_shipped_head_was_trained_on():
    """Version 1 must not change: it decides the shipped head's held-out set and its recorded figures."""
    import hashlib

    from specdec.train.prompts import written

    code = "def total(values):\n    s = 0\n    for v in values:\n        s += v\n    return s\n"
    digest = lambda prompts: hashlib.sha256(json.dumps(prompts).encode()).hexdigest()  # noqa: E731
    assert digest(written(0, 2000, [code])) == "0c77da5377527f71691b9a13e653b03b0deef0caf060f223db2bd6de9676364a"
    assert digest(written(3, 500, [])) == "9930b696487d6c64d061acfc264076c98ab927e84642659b5b064ef8a09515d5"


def test_version_2_writes_tasks_from_docstrings_doc_sentences_and_generated_schemas():
    from specdec.train.prompts import TABLES, written

    material = project_material()
    assert material.tasks and material.sentences
    prompts = written(0, 2000, [], 2, material)
    by_kind = {}
    for kind, prompt in prompts:
        by_kind.setdefault(kind, []).append(prompt)
    signatures = {signature for signature, _ in material.tasks}
    assert any(any(f"`{s}`" in p for s in signatures) for p in by_kind["code"])
    assert any(any(sentence in p for sentence in material.sentences) for p in by_kind["translation"])
    generated = [p for p in by_kind["sql"] if any(f"`{table}(" in p for table in TABLES)]
    assert len(set(generated)) >= 50  # the three schemas of version 1 gave 9 tasks in all
    with pytest.raises(ValueError, match="versions 1 and 2, not 3"):
        written(0, 10, [], 3)


def test_a_folder_or_head_recorded_before_prompt_versions_reads_as_version_1(tiny_pair, tmp_path):
    from dataclasses import replace

    from specdec.kernels.head_offer import target_key
    from specdec.train.data import write_json
    from specdec.train.run import Workspace

    assert Recipe().prompts == 2 and Recipe.recorded({"intermediate": 64}) == Recipe(intermediate=64, prompts=1)
    older = {k: v for k, v in TINY.as_dict().items() if k != "prompts"}
    (tmp_path / "old").mkdir()
    write_json(tmp_path / "old" / "plan.json", {"target": target_key(tiny_pair), "recipe": older, "plan": Plan().as_dict(), "elapsed": 0.0})
    Workspace.open(tmp_path / "old", target_key(tiny_pair), replace(TINY, prompts=1), Plan())  # resumes as it ran
    with pytest.raises(ValueError, match=r"other settings: prompts 1 \(given 2\)"):
        Workspace.open(tmp_path / "old", target_key(tiny_pair), TINY, Plan())


def test_the_command_refuses_bad_settings_in_one_line(capsys):
    from specdec.__main__ import main

    assert main(["head", "train", "--pair", "tiny-random", "--minutes", "0"]) == 2
    assert "--minutes must be positive" in capsys.readouterr().err
    assert main(["head", "train", "--pair", "tiny-random", "--intermediate", "0"]) == 2
    assert "--intermediate and --depth must be >= 1" in capsys.readouterr().err


def test_the_vocabulary_is_the_targets_most_frequent_greedy_tokens_then_the_list(tiny_pair):
    from specdec.kernels.head_offer import head_ids
    from specdec.train.data import Sequence
    from specdec.train.vocabulary import coverage, target_counts, training_vocabulary, written_tokens

    greedy = torch.tensor([90, 90, 90, 41, 41, 23])
    top = torch.stack([greedy, torch.full_like(greedy, 5)], dim=1)  # (6, 2): column 0 is the target's greedy token
    answer = Sequence(torch.tensor([1, 2, 90, 90, 41, 23]), torch.zeros(6, 4), top, torch.zeros(6, 2), answer_from=2)
    assert target_counts([answer]) == {90: 3, 41: 2, 23: 1}
    special = set(tiny_pair.eos_ids) | set(getattr(tiny_pair.tokenizer, "all_special_ids", []))
    size = len(special) + 2
    ids = training_vocabulary(tiny_pair, [answer], size).tolist()
    assert set(ids) == special | {90, 41}  # the special tokens always, then the two most frequent
    assert ids != head_ids(tiny_pair, size).tolist()  # not the shipped list's choice
    assert written_tokens([answer]).tolist() == [90, 90, 41, 23]  # the answer's own tokens, after its prompt
    assert coverage(torch.tensor(ids), written_tokens([answer])) == pytest.approx(3 / 4)


def test_the_walk_counts_as_the_bench_counts_on_hand_made_events():
    """Seven starts, K = 3: the walk drafts from start 0, keeps the leading matches, and starts again
    after them and the target's token; its steps counted equal the bench's count of the same steps."""
    from types import SimpleNamespace

    from specdec.measure.positions import position_acceptance, steps_counted
    from specdec.train.evaluate import walk

    agree = torch.tensor([[1, 1, 0], [0, 0, 0], [0, 1, 1], [1, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 0]], dtype=torch.bool)
    followed = torch.ones_like(agree)
    available = torch.tensor([[1, 1, 1]] * 5 + [[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    steps = walk(agree, followed, available, k=3)
    # start 0 keeps 2 (next 3); start 3 keeps 1 (next 5); start 5 misses at once, 2 positions left (next 6); start 6 keeps its one
    assert steps == [(3, 2), (2, 1), (1, 0), (1, 1)]
    events = [SimpleNamespace(n_drafted=3, accepted=2), SimpleNamespace(n_drafted=0, accepted=0),
              SimpleNamespace(n_drafted=2, accepted=1), SimpleNamespace(n_drafted=1, accepted=0), SimpleNamespace(n_drafted=1, accepted=1)]
    assert steps_counted(steps) == position_acceptance(events)
    assert position_acceptance(events).rates == (3 / 4, 1 / 2, 0.0)
    # the text leaves the target's greedy output after position 1 of start 0: position 2 is not judged there
    cut = walk(agree, torch.tensor([[1, 0, 1]] + [[1, 1, 1]] * 6, dtype=torch.bool), available, k=3)
    assert cut[0] == (2, 2)  # positions 1 and 2 judged and kept; position 3 followed other text


def test_an_epochs_batches_hold_every_window_once_and_pad_little():
    """Answers of 64 to 283 tokens beside chunks of 512: drawn at random, a fifth of every batch was
    padding; sorted by length in runs of ALIKE windows, under 5%. The same seed and epoch give the same batches."""
    import random

    from specdec.train.trainer import epoch_batches

    rng = random.Random(0)
    lengths = [rng.randint(64, 283) for _ in range(1536)] + [512] * 384
    windows = [type("W", (), {"__len__": lambda self, n=n: n})() for n in lengths]
    recipe = Recipe()
    batches = epoch_batches(windows, recipe, seed=0, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(len(windows)))
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    assert all(max(lengths[i] for i in b) * len(b) <= recipe.batch_positions for b in batches)
    assert 1 - sum(lengths) / padded < 0.05
    assert batches == epoch_batches(windows, recipe, seed=0, epoch=0) != epoch_batches(windows, recipe, seed=0, epoch=1)
    as_before = epoch_batches(windows, Recipe(alike=0), seed=0, epoch=0)  # how the heads before it were trained
    assert [i for b in as_before for i in b] == torch.randperm(len(windows), generator=torch.Generator().manual_seed(0)).tolist()


def test_head_vocab_counts_a_vocabulary_for_a_head_without_one_and_head_eval_reads_it(tiny_pair, text_root, tmp_path, capsys):
    """A head file without ids drafts from the shipped list; `head vocab` counts one from the working
    folder's training data, writes the head with it and its figures; `head eval` then judges it."""
    from specdec.__main__ import main
    from specdec.kernels.head_offer import target_key
    from specdec.kernels.head_store import save_head
    from specdec.train.data import load_split
    from specdec.train.trainer import new_head
    from specdec.train.vocabulary import training_vocabulary

    from specdec.models.pair import load_pair

    work = tmp_path / "work"
    run(tiny_pair, text_root, work, tmp_path / "trained.safetensors", steps=2)  # the data shards
    as_loaded = load_pair("tiny-random", device="cpu")  # as the command loads it (its dtype: its own weights key)
    small = {**TINY.as_dict(), "vocab": 64}
    plain = save_head(tmp_path / "plain.safetensors", new_head(as_loaded.target, TINY, 0), target_key(as_loaded), small, {})
    common = ["--pair", "tiny-random", "--work", str(work), "--text-root", str(text_root)]
    out = tmp_path / "counted.safetensors"
    assert main(["head", "vocab", *common, "--head", str(plain), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "the head's own vocabulary" in said and "counted from" in said and "vocabulary coverage" in said
    stored = read_head(out, target_key(as_loaded), as_loaded.target.config)
    assert torch.equal(stored.ids, training_vocabulary(as_loaded, load_split(work, "train"), 64))
    assert stored.record["recipe"]["vocab_ids"] == 64 and stored.record["figures"]["walk"]["steps"] > 0
    assert main(["head", "eval", *common, "--head", str(out)]) == 0
    said = capsys.readouterr().out
    assert "64 tokens, counted from its training data" in said and "as a run" in said
    empty = ["--pair", "tiny-random", "--work", str(tmp_path / "none"), "--text-root", str(text_root)]
    assert main(["head", "vocab", *empty, "--head", str(plain), "--out", str(tmp_path / "x.safetensors")]) == 2
    assert "no training data in" in capsys.readouterr().err


def test_answers_in_a_batch_equal_each_prompt_answered_alone_and_rows_that_end_leave_the_batch(tiny_pair, monkeypatch):
    """Three prompts of different lengths answered together, with the token that one of them writes
    second declared end-of-sequence: each sequence is its prompt and its greedy answer up to (not
    including) the ending token, its features the target's recomputed over the whole sequence, its
    labels the target's own distribution there (the decode step's logits reused)."""
    from transformers import DynamicCache

    from specdec.train.collect import answer, labelled

    prompts = [[3, 9, 27, 4, 11], [5, 8], [21, 22, 23, 24, 25, 26, 27, 28]]
    alone = answer(tiny_pair.target, prompts[:1], 12, set(), 0)[0]
    eos = int(alone.ids[len(prompts[0]) + 1])  # the first prompt's second answer token ends its answer
    selected = []
    real_select = DynamicCache.batch_select_indices
    monkeypatch.setattr(DynamicCache, "batch_select_indices", lambda self, keep: (selected.append(keep.tolist()), real_select(self, keep))[1])
    together = answer(tiny_pair.target, prompts, 12, {eos}, 0)
    assert together[0].ids.tolist() == alone.ids[: len(prompts[0]) + 1].tolist() and selected  # it ended, and left the batch
    for p, seq in zip(prompts, together):
        assert seq.answer_from == len(p) and seq.ids[: len(p)].tolist() == p and eos not in seq.ids[len(p) :].tolist()
        with torch.no_grad():
            hidden = tiny_pair.target.model(input_ids=seq.ids[None]).last_hidden_state[0]
        torch.testing.assert_close(seq.features.float(), hidden.to(torch.bfloat16).float(), atol=0.05, rtol=0.05)
        want = labelled(tiny_pair.target.lm_head, seq.ids, hidden)
        assert seq.top_ids[:, 0].tolist() == want.top_ids[:, 0].tolist()
        assert seq.top_ids[len(p) - 1 : -1, 0].tolist() == seq.ids[len(p) :].tolist()  # greedy: each answer token is the label before it
        torch.testing.assert_close(seq.top_logp, want.top_logp, atol=1e-3, rtol=1e-3)


# --- EAGLE-3's fused features (an ablation: scripts/head_ablation.py) -----------------------------------

def test_the_kept_layers_rows_equal_the_targets_recomputed_hidden_states(tiny_pair):
    """Answers and read text keep the rows after the low and middle layers beside the features, the
    same the target computes over the whole sequence from scratch, and a shard keeps them whole."""
    from specdec.train.collect import answer, fused_layers, read_features
    from specdec.train.data import read_shard, write_shard

    layers = fused_layers(tiny_pair.target.config)
    answered = answer(tiny_pair.target, [[3, 9, 27, 4, 11], [5, 8]], 10, set(), 0, layers)
    read = read_features(tiny_pair.target, [[7, 8, 9, 10, 11, 12]], layers)
    for seq in answered + read:
        with torch.no_grad():
            states = tiny_pair.target.model(input_ids=seq.ids[None], output_hidden_states=True).hidden_states
        want = torch.stack([states[i][0] for i in layers], dim=1)  # (n, 2, H)
        assert seq.layers.shape == want.shape
        torch.testing.assert_close(seq.layers.float(), want.to(torch.bfloat16).float(), atol=0.05, rtol=0.05)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "answers-train-00000.safetensors"
        write_shard(path, answered, "answers")
        back = read_shard(path)
        assert all(torch.equal(a.layers, b.layers) for a, b in zip(answered, back))
        assert back[0].cut(1, 4).layers.shape == (3, 2, tiny_pair.target.config.hidden_size)


def test_a_fused_head_starts_as_the_unfused_one_and_learns_its_fusion(tiny_pair):
    """Fusion's fc starts as [0 ; 0 ; I], so the head's drafts are at first those it makes from the
    last layer alone; a training step moves the fusion's weights too."""
    from dataclasses import replace

    from specdec.train.collect import answer, fused_layers
    from specdec.train.trainer import Trainer, new_head
    from specdec.train.unroll import unroll

    seq = answer(tiny_pair.target, [[3, 9, 27, 4, 11, 6, 2]], 12, set(), 0, fused_layers(tiny_pair.target.config))[0]
    recipe = replace(TINY, fusion=True)
    target = tiny_pair.target
    trainer = Trainer(new_head(target, recipe, 0), target.get_input_embeddings(), target.get_output_embeddings().weight, recipe, False)
    with torch.no_grad():
        feats, embeds = seq.features.float()[None], target.get_input_embeddings()(seq.ids[None].clone()).float()
        fused = unroll(trainer.head, feats, embeds, 2, trainer.fusion(feats, seq.layers.float()[None]))
        alone = unroll(trainer.head, feats, embeds, 2)
    for a, b in zip(fused, alone):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    before = trainer.fusion.fc.weight.detach().clone()
    parts = trainer.step([seq], 3e-3)
    assert torch.isfinite(torch.tensor(parts["loss"])) and not torch.equal(before, trainer.fusion.fc.weight)


def test_head_train_refuses_fused_features_and_an_older_folder_still_opens(tiny_pair, text_root, tmp_path):
    from dataclasses import replace

    from specdec.kernels.head_offer import target_key
    from specdec.train.data import write_json
    from specdec.train.run import Workspace, train

    with pytest.raises(ValueError, match="a head with fused features cannot draft yet"):
        train(tiny_pair, replace(TINY, fusion=True), Plan(seed=0, answers=8, code_tokens=600, steps=1), tmp_path / "w",
              tmp_path / "h.safetensors", bars=False, root=text_root)
    older = {k: v for k, v in TINY.as_dict().items() if k != "fusion"}  # a folder written before the field existed
    (tmp_path / "old").mkdir()
    write_json(tmp_path / "old" / "plan.json", {"target": target_key(tiny_pair), "recipe": older, "plan": Plan().as_dict(), "elapsed": 0.0})
    assert Workspace.open(tmp_path / "old", target_key(tiny_pair), TINY, Plan()).record["recipe"] == older
    with pytest.raises(ValueError, match=r"holds a run with other settings: fusion False \(given True\)"):
        Workspace.open(tmp_path / "old", target_key(tiny_pair), replace(TINY, fusion=True), Plan())


def test_a_head_is_judged_on_the_folders_held_out_answers_with_the_folders_kinds(tiny_pair, text_root, tmp_path):
    """A head trained on version 1's prompts, judged in a version 2 folder: the answers and their
    kinds are the folder's, from the recipe the folder recorded, not the head's."""
    from dataclasses import replace

    from specdec.kernels.head_offer import head_weights
    from specdec.train import gather
    from specdec.train.run import evaluation

    run(tiny_pair, text_root, tmp_path / "v2", tmp_path / "v2.safetensors", steps=3)
    head = head_weights(tiny_pair, read_head(tmp_path / "v2.safetensors"), "dense")
    version_1 = replace(TINY, prompts=1)
    judged = evaluation(tiny_pair, head, version_1, tmp_path / "v2", 0, text_root)
    assert judged.kinds == gather.Sources.of(tiny_pair, TINY, 0, text_root).held_kinds[: len(judged.answer_sequences)]
    assert judged.kinds != gather.Sources.of(tiny_pair, version_1, 0, text_root).held_kinds[: len(judged.answer_sequences)]
