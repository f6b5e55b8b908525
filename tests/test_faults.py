"""Faults on a deployment: a damaged or missing bundle file, a read-only cache, a model folder
without weights, custom code in a model folder. Each ends in a readable message (PairUnavailable,
which the page shows as its status line), and the pairs that did load keep serving.

The bundle here is fake (small chunk packages on sys.path) and converts into tiny-random folders,
so every load is real and fast."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest

from tests.support.runs import make_hub_cache
from specdec.models import bundle, bundle_chunks, gguf_dense
from specdec.core.config import GenerationConfig
from specdec.models import presets
from specdec.models.presets import PairPreset
from specdec.engines.ours import OurSource
from specdec.models.pair import load_pair
from specdec.serving.pairs import Offer, PairStore, PairUnavailable

TINY, PAIR, NAME = "tiny-random", "fake-pair", "fake-faults-bundle"


@pytest.fixture(scope="module")
def tiny_folders(tiny_pair, tmp_path_factory):
    """tiny-random saved as two model folders (what a conversion would write)."""
    root = tmp_path_factory.mktemp("tiny-saved")
    for role, model in (("target", tiny_pair.target), ("draft", tiny_pair.draft)):
        model.save_pretrained(root / role)
        tiny_pair.tokenizer.save_pretrained(root / role)
    return root


@pytest.fixture
def fake(tmp_path, monkeypatch, tiny_folders):
    site = tmp_path / "site"
    models = []
    for role in ("target", "draft"):
        prefix = f"fake-{role}-{uuid.uuid4().hex[:8]}-part"
        chunks = bundle_chunks.chunk_series(prefix, 2)
        parts = [f"{role} chunk {i};".encode() * 100 for i in range(2)]
        for chunk, data in zip(chunks, parts):
            path = site / chunk.module / chunk.file
            path.parent.mkdir(parents=True)
            (site / chunk.module / "__init__.py").write_text("")
            path.write_bytes(data)
        models.append(bundle_chunks.BundleModel(role, f"fake {role}", chunks, hashlib.sha256(b"".join(parts)).hexdigest()))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(bundle.BUNDLES, NAME, tuple(models))
    monkeypatch.setitem(presets.PRESETS, PAIR, PairPreset(PAIR, "Fake/Target", "Fake/Draft", "fake pair", bundle=NAME, chat=False))
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    converted = []

    def fake_convert(gguf, out, model):
        converted.append(model.key)
        for file in (tiny_folders / model.key).iterdir():
            shutil.copy(file, out / file.name)

    monkeypatch.setattr(gguf_dense, "convert_gguf", fake_convert)

    def chunk_path(role: str, i: int) -> Path:
        model = models[0] if role == "target" else models[1]
        return site / model.chunks[i].module / model.chunks[i].file

    return SimpleNamespace(cache=tmp_path / "cache" / NAME, hub=tmp_path / "hub", chunk=chunk_path, converted=converted,
                           store=lambda: PairStore(Offer(TINY, (TINY, PAIR)), device="cpu", dtype="fp32"))


def still_serving(store: PairStore, tiny) -> None:
    """The pair loaded before the fault is the same object, and it generates."""
    with store.acquire(TINY) as pair:
        assert pair is tiny
        assert len(list(OurSource(pair, GenerationConfig(max_new_tokens=4)).run("def f(x):"))) > 0


def test_fake_bundle_loads(fake):
    store = fake.store()
    with store.acquire(PAIR) as pair:
        assert pair.source == "embedded bundle" and fake.converted == ["target", "draft"]


def test_corrupt_bundle_file(fake):
    store = fake.store()
    with store.acquire(TINY) as tiny:
        pass
    fake.chunk("target", 1).write_bytes(b"damaged")
    with pytest.raises(PairUnavailable, match=r"fake target GGUF .* is corrupt \(SHA-256 expected .*\): a chunk is truncated or damaged\. Reinstall"):
        with store.acquire(PAIR):
            pass
    assert store.loaded() == [TINY]
    still_serving(store, tiny)


def test_missing_bundle_file(fake):
    store = fake.store()
    with store.acquire(TINY) as tiny:
        pass
    fake.chunk("draft", 0).unlink()
    with pytest.raises(PairUnavailable) as err:
        with store.acquire(PAIR):
            pass
    message = str(err.value)
    assert message.startswith("could not load pair 'fake-pair'; tried the embedded bundle (1 packages missing, e.g. fake-draft-")
    assert "local Hugging Face cache (Fake/Target, Fake/Draft" in message and "\n" not in message
    still_serving(store, tiny)


def test_damaged_converted_copy_names_its_folder(fake):
    with fake.store().acquire(PAIR):
        pass
    weights = fake.cache / "target" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated, the marker still says complete
    store = fake.store()
    with store.acquire(TINY) as tiny:
        pass
    with pytest.raises(PairUnavailable, match=rf"converted copy of 'fake-pair' in {fake.cache} could not be loaded \(.+\)\. Delete that folder"):
        with store.acquire(PAIR):
            pass
    still_serving(store, tiny)


def test_converted_copy_without_weights_is_converted_again(fake):
    with fake.store().acquire(PAIR):
        pass
    (fake.cache / "draft" / "model.safetensors").unlink()
    with fake.store().acquire(PAIR) as pair:
        assert pair.source == "embedded bundle"
    assert fake.converted == ["target", "draft", "draft"]


def read_only(folder: Path, request) -> None:
    """Make `folder` unwritable for this process: permissions, or for root (whom permissions do not bind)
    the immutable attribute; skip where neither holds."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    request.addfinalizer(lambda: folder.chmod(0o755))
    if os.access(folder, os.W_OK) and shutil.which("chattr"):
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
            request.addfinalizer(lambda: subprocess.run(["chattr", "-i", str(folder)], check=True))
    try:
        (folder / "probe").mkdir()
    except OSError:
        return
    (folder / "probe").rmdir()
    pytest.skip("cannot make a folder read-only for this user on this file system")


def test_read_only_cache_folder(fake, request):
    read_only(fake.cache.parent, request)
    store = fake.store()
    with store.acquire(TINY) as tiny:
        pass
    with pytest.raises(PairUnavailable, match=r"Cannot write the model cache at .*; set SPECDEC_CACHE to one"):
        with store.acquire(PAIR):
            pass
    still_serving(store, tiny)


def test_model_folder_without_weights(fake, tiny_folders):
    fake.chunk("target", 0).unlink()  # no bundle: the preset falls back to the local Hugging Face cache
    for repo, role in (("Fake/Target", "target"), ("Fake/Draft", "draft")):
        files = {f.name: f for f in (tiny_folders / role).iterdir() if f.suffix != ".safetensors"}
        make_hub_cache(fake.hub, repo, files)
    store = fake.store()
    with store.acquire(TINY) as tiny:
        pass
    with pytest.raises(PairUnavailable, match=r"local Hugging Face cache \(Fake/Target, Fake/Draft: .*model\.safetensors"):
        with store.acquire(PAIR):
            pass
    still_serving(store, tiny)
    with pytest.raises(ValueError, match=r"could not load model .*model\.safetensors"):  # the command line's folder path
        load_pair(target=str(next(fake.hub.glob("models--Fake--Target/snapshots/*"))), device="cpu", dtype="fp32")


@pytest.mark.parametrize("model_type", ["qwen2", "evil-model"])
def test_custom_code_in_a_model_folder_never_runs(tiny_folders, tmp_path, model_type):
    """A folder asking for its own code: a known architecture loads with transformers' own class, an
    unknown one is refused with a message; the folder's code runs in neither case."""
    folder = tmp_path / "custom"
    shutil.copytree(tiny_folders / "target", folder)
    marker = tmp_path / "code-ran"
    settings = json.loads((folder / "config.json").read_text())
    settings["model_type"] = model_type
    settings["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(settings))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    if model_type == "qwen2":
        assert type(load_pair(target=str(folder), device="cpu", dtype="fp32").target).__module__.startswith("transformers.")
    else:
        with pytest.raises(ValueError, match="contains custom code which must be executed"):
            load_pair(target=str(folder), device="cpu", dtype="fp32")
    assert not marker.exists()


def test_loader_never_asks_for_remote_code(fake, monkeypatch):
    import transformers

    seen = []
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, **kwargs):
            seen.append(kwargs.get("trust_remote_code"))
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    with fake.store().acquire(PAIR):
        pass
    # two tokenizers, two models, each told False (left unset, transformers would ask on the terminal)
    assert seen == [False] * 4
