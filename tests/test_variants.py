"""Draft variants (specdec/kernels/variants.py): names, quantization error, exact output with every
variant, the truncated head's distribution, and the disk cache."""

import json
from dataclasses import replace

import pytest
import torch
from scipy.stats import chisquare

from tests.support.runs import run_checked, tokens
from specdec.kernels import quant
from specdec.kernels import variant_store
from specdec.kernels import device_offer, variants, w8a8_build
from specdec.core.acceptance import speculative_sample
from specdec.core.config import GenerationConfig
from specdec.kernels.quant import QuantEmbedding, QuantLinear, module_bytes, quantize, unpack_nibbles
from specdec.core.sampling import probs_from_logits
from specdec.kernels.variant_store import SubsetHead
from specdec.core.variant_names import VARIANTS
from specdec.kernels.variants import VariantSpec, parse_variant
from specdec.models.built import Built

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"
TINY_HEAD = 256  # tiny-random has 320 tokens: its -v16k / -v32k heads keep 64 / 128 of them


@pytest.fixture(scope="module")
def pair(tiny_pair):
    """tiny-random with every variant built in memory, the truncated heads scaled to its vocabulary."""
    built = {}
    for name in device_offer.draft_variants(tiny_pair.device).names:  # the w8a8 ones where this machine runs that kernel
        spec = parse_variant(name)
        if not spec.is_stock:
            small = replace(spec, vocab=spec.vocab // TINY_HEAD if spec.vocab else None)
            built[name] = variants.load_or_build(tiny_pair, small)
    return replace(tiny_pair, built=Built(drafts=built))


@pytest.fixture(scope="module")
def plain(pair):
    return tokens(run_checked(pair, PROMPT, GenerationConfig(drafter="none", max_new_tokens=40)))


def test_names_parse_and_bad_names_are_refused():
    assert parse_variant("int4-v32k") == VariantSpec("int4-v32k", 4, 32768)
    assert parse_variant("dense").is_stock and parse_variant("int8").vocab is None
    assert parse_variant("dense-v16k") == VariantSpec("dense-v16k", None, 16384)
    for bad in ("int5", "int4-v8k", "INT4", "", None, "int4-v32k-v16k"):
        with pytest.raises(ValueError, match="draft_variant must be one of dense, dense-v16k"):
            parse_variant(bad)
    with pytest.raises(ValueError, match="draft_variant"):
        GenerationConfig(draft_variant="fp8").validate()


@pytest.mark.parametrize("name", VARIANTS)
def test_greedy_output_is_identical_with_every_variant(pair, plain, name):
    if name not in device_offer.draft_variants(pair.device).names:
        pytest.skip(w8a8_build.unavailable_reason(pair.device))
    events = run_checked(pair, PROMPT, GenerationConfig(k=4, max_new_tokens=40, draft_variant=name))
    assert tokens(events) == plain
    assert sum(e.accepted for e in events) > 0  # the variant really drafted, and the target kept some
    head = variants.draft_model(pair, name).get_output_embeddings()
    if isinstance(head, SubsetHead):
        kept = set(head.ids.tolist())
        assert all(t in kept for e in events for t in e.drafted)  # the draft proposes only from its subset
        assert any(t not in kept for t in plain)  # ...and the output still holds tokens outside it


def test_truncated_head_samples_from_its_subset(pair):
    events = run_checked(pair, PROMPT, GenerationConfig(k=3, temperature=1.0, seed=5, max_new_tokens=32, draft_variant="int4-v16k"))
    kept = set(variants.draft_model(pair, "int4-v16k").get_output_embeddings().ids.tolist())
    drafted = [t for e in events for t in e.drafted]
    assert drafted and all(t in kept for t in drafted)
    assert all(q > 0 for e in events for q in e.p_draft)


def test_variants_shrink_resident_memory(pair):
    stock = module_bytes(pair.draft)
    sizes = {name: module_bytes(variants.draft_model(pair, name)) for name in ("int8", "int4", "int4-v32k")}
    assert sizes["int4-v32k"] < sizes["int4"] < sizes["int8"] < stock


# --- quantization ---------------------------------------------------------------------------------


def test_int8_error_is_at_most_half_a_step():
    w = torch.randn(48, 96)
    qw = quantize(w, 8)
    assert ((qw.dequantize() - w).abs() <= qw.scale[:, None] / 2 + 1e-6).all()


def test_int4_search_never_does_worse_than_min_max():
    torch.manual_seed(0)
    w = torch.randn(40, 128) * torch.rand(40, 1)
    w[0, 5] = 9.0  # an outlier: clipping the range helps every other weight of its group
    chosen = quantize(w, 4, group=32)
    err = (chosen.dequantize() - w).square().reshape(40, 4, 32).sum(-1)
    groups = w.reshape(40, 4, 32)
    step = (groups.amax(-1) - groups.amin(-1)) / 15
    minmax_bound = (step / 2).square() * 32  # min-max rounding: at most half a step per weight
    assert (err <= minmax_bound * 1.01 + 1e-6).all()  # (1%: scales are kept in float16)
    assert err[0, 0] < 0.5 * minmax_bound[0, 0]  # the outlier's group gains from clipping


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantized_linear_computes_x_times_the_dequantized_weight(bits, dtype):
    torch.manual_seed(1)
    w, b, x = torch.randn(96, 64), torch.randn(96), torch.randn(2, 3, 64)
    qw = quantize(w, bits, group=32)
    want = x @ qw.dequantize().T + b  # (2, 3, 96)
    tol = 1e-3 if dtype == torch.float32 else 0.3
    for kernel in (True, False):  # torch's CPU kernel, and the dequantize-on-the-fly path used off the CPU
        layer = QuantLinear(qw, b, dtype, torch.device("cpu"), kernel=kernel)
        got = layer(x.to(dtype)).float()
        assert got.shape == (2, 3, 96)
        torch.testing.assert_close(got, want, atol=tol, rtol=0.02)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_int4_kernel_gets_exactly_the_dequantized_weights(dtype):
    # Groups whose range is small beside their offset: a zero point rounded on its way to the
    # kernel (bf16 keeps 8 significant bits) would move them by whole steps.
    torch.manual_seed(2)
    w = 0.02 * torch.randn(16, 128)
    w[:8, :32] = 0.5 + 0.001 * torch.randn(8, 32)
    w[8:, 64:96] = -3.0 + 0.01 * torch.randn(8, 32)
    qw = quantize(w, 4, group=32)
    layer = QuantLinear(qw, None, dtype, torch.device("cpu"), kernel=True)
    scale, zero = layer.scale.float().unbind(-1)  # (in/group, out) each: what the kernel is given
    q = unpack_nibbles(qw.q).float().reshape(16, 4, 32)
    given = ((q - 8) * scale.T[..., None] + zero.T[..., None]).reshape(16, 128)
    steps = (given - qw.dequantize()).abs() / qw.scale.float().repeat_interleave(32, dim=1)
    assert steps.max() <= 1e-3  # in units of each group's step
    assert (qw.dequantize() - w).abs()[:8, :32].max() < 0.001  # and the offset groups are still quantized well


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_embedding_reads_dequantized_rows(bits):
    w = torch.randn(50, 64)
    qw = quantize(w, bits, group=32)
    ids = torch.tensor([[3, 7, 3], [49, 0, 1]])
    got = QuantEmbedding(qw, torch.float32, torch.device("cpu"))(ids)
    torch.testing.assert_close(got, qw.dequantize()[ids])


# --- the truncated head keeps rejection sampling exact --------------------------------------------

SIGNIFICANCE = 1e-3
TRIALS = 4000
P = torch.tensor([0.30, 0.22, 0.15, 0.12, 0.09, 0.07, 0.05])  # the target; tokens 5 and 6 lie outside the subset
DRAFT_LOGITS = torch.tensor([0.2, 1.5, -0.3, 0.9, 1.1, 2.0, 0.4])  # the draft's full-vocabulary scores
SUBSET = torch.tensor([0, 1, 2, 3, 4])


def truncated_q() -> torch.Tensor:
    """q as a truncated-head variant makes it: the head's -inf row through the engine's softmax."""
    head = SubsetHead(torch.nn.Identity(), SUBSET, vocab=len(P))
    return probs_from_logits(head(DRAFT_LOGITS[SUBSET][None]), temperature=1.0)[0]


def broken_q() -> torch.Tensor:
    """The mistake the design rules out: a full-vocabulary softmax cut to the subset, not renormalised."""
    return torch.softmax(DRAFT_LOGITS, -1) * torch.isin(torch.arange(len(P)), SUBSET)


def first_token_counts(q: torch.Tensor) -> list[int]:
    generator = torch.Generator().manual_seed(99)
    k = 2
    p, qs = P.expand(k + 1, -1), q.expand(k, -1)
    counts = [0] * len(P)
    for _ in range(TRIALS):
        drafts = torch.multinomial(qs, 1, generator=generator).squeeze(-1)  # proposals come from the subset
        n, token = speculative_sample(drafts, p, qs, generator)
        counts[(drafts[: int(n)].tolist() + [int(token)])[0]] += 1
    return counts


def p_value(counts) -> float:
    expected = P.double() / P.double().sum()
    return chisquare(counts, (sum(counts) * expected).tolist()).pvalue


def test_truncated_head_q_lives_on_the_subset():
    q = truncated_q()
    assert q[5:].sum() == 0 and torch.isclose(q.sum(), torch.tensor(1.0))


def test_truncated_head_keeps_the_target_distribution():
    counts = first_token_counts(truncated_q())
    assert counts[5] > 0 and counts[6] > 0  # tokens outside the subset still come out, via the residual
    assert p_value(counts) > SIGNIFICANCE


def test_unrenormalised_subset_q_is_detected():
    assert p_value(first_token_counts(broken_q())) < SIGNIFICANCE


# --- the disk cache -------------------------------------------------------------------------------


def _cached_pair(tiny_pair, root):
    """tiny-random as if its draft had a converted folder under `root` (config + the converter's marker)."""
    draft_dir = root / "tiny-draft"
    draft_dir.mkdir(exist_ok=True)
    tiny_pair.draft.config.save_pretrained(draft_dir)
    (draft_dir / "complete.json").write_text(json.dumps({"sha256": "tiny", "format": 1}))
    return replace(tiny_pair, draft_dir=draft_dir, built=Built())


def test_variant_is_built_once_and_then_loaded_from_disk(tiny_pair, tmp_path, monkeypatch):
    first = _cached_pair(tiny_pair, tmp_path)
    built = variants.draft_model(first, "int4")
    folder = tmp_path / "tiny-draft.int4"
    assert (folder / "complete.json").is_file() and (folder / "variant.safetensors").is_file()
    assert not list(tmp_path.glob(".*.partial"))
    assert variants.draft_model(first, "int4") is built  # kept by the pair: switching back costs nothing

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt although the cache was complete")

    monkeypatch.setattr(variants, "quantized_state", no_rebuild)  # what variants calls to build
    restarted = _cached_pair(tiny_pair, tmp_path)  # a new process: nothing in memory
    loaded = variants.draft_model(restarted, "int4")
    ids = torch.tensor([[5, 9, 17, 33]])
    with torch.inference_mode():
        torch.testing.assert_close(loaded(input_ids=ids).logits, built(input_ids=ids).logits)


def _builds(monkeypatch) -> list:
    """Record every quantization variants.py runs (a build, as opposed to a load from disk)."""
    builds, real = [], variants.quantized_state
    monkeypatch.setattr(variants, "quantized_state", lambda *args: builds.append(args) or real(*args))
    return builds


def _load(pair, name="int8"):
    return variants.draft_model(replace(pair, built=Built()), name)  # a new process: nothing in memory


def _change_converted_copy(pair, monkeypatch):
    (pair.draft_dir / "complete.json").write_text(json.dumps({"sha256": "another draft", "format": 1}))


def _change_library(pair, monkeypatch):
    real = variant_store.library_versions
    monkeypatch.setattr(variant_store, "library_versions", lambda: {**real(), "transformers": "99.0"})


def _change_quantizer(pair, monkeypatch):
    monkeypatch.setattr(quant, "CLIP_CANDIDATES", (1.0, 0.9))


def _change_quantizer_format(pair, monkeypatch):
    monkeypatch.setattr(quant, "QUANT_FORMAT", quant.QUANT_FORMAT + 1)


def _change_recipe(pair, monkeypatch):
    monkeypatch.setitem(variants.RECIPES, "int8", replace(variants.RECIPES["int8"], embedding=4))


def _change_store_format(pair, monkeypatch):
    monkeypatch.setattr(variant_store, "FORMAT", variant_store.FORMAT + 1)


def _truncate_the_file(pair, monkeypatch):
    path = pair.draft_dir.with_name("tiny-draft.int8") / "variant.safetensors"
    path.write_bytes(path.read_bytes()[:1000])


def _damage_the_file(pair, monkeypatch):
    path = pair.draft_dir.with_name("tiny-draft.int8") / "variant.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # same size, one bit off
    path.write_bytes(bytes(data))


def _garble_the_marker(pair, monkeypatch):
    (pair.draft_dir.with_name("tiny-draft.int8") / "complete.json").write_text("{not json")


@pytest.mark.parametrize("change", [_change_converted_copy, _change_library, _change_quantizer, _change_quantizer_format,
                                    _change_recipe, _change_store_format, _truncate_the_file, _damage_the_file,
                                    _garble_the_marker])
def test_a_changed_input_or_a_broken_file_means_a_rebuild(tiny_pair, tmp_path, monkeypatch, change):
    pair = _cached_pair(tiny_pair, tmp_path)
    builds = _builds(monkeypatch)
    first = _load(pair)
    _load(pair)
    assert len(builds) == 1  # built once, then loaded
    change(pair, monkeypatch)
    rebuilt = _load(pair)  # no crash: built again, and stored again
    assert len(builds) == 2
    _load(pair)
    assert len(builds) == 2  # the new build is what the cache holds now
    ids = torch.tensor([[5, 9, 17, 33]])
    if change in (_truncate_the_file, _damage_the_file, _garble_the_marker):
        with torch.inference_mode():
            torch.testing.assert_close(rebuilt(input_ids=ids).logits, first(input_ids=ids).logits)


def test_a_changed_vocabulary_subset_means_a_rebuild(tiny_pair, tmp_path, monkeypatch):
    order = list(range(tiny_pair.vocab_size))
    pair = replace(_cached_pair(tiny_pair, tmp_path), token_order=order)
    spec = VariantSpec("int8-v16k", 8, 64)  # tiny-random's scale: 64 of its 320 tokens

    def load(p):
        return variants.load_or_build(p, spec)

    builds = _builds(monkeypatch)
    load(pair)
    load(pair)
    assert len(builds) == 1
    load(replace(pair, token_order=order[::-1]))  # another frequency list: other rows kept
    assert len(builds) == 2
    load(replace(pair, token_order=order[::-1], eos_ids=frozenset({150})))  # another end-of-sequence token kept
    assert len(builds) == 3
    load(replace(pair, token_order=order[::-1], eos_ids=frozenset({150})))
    assert len(builds) == 3


def test_unreadable_source_markers_never_match(tiny_pair, tmp_path, monkeypatch):
    pair = _cached_pair(tiny_pair, tmp_path)
    (pair.draft_dir / "complete.json").write_text("{garbled")
    builds = _builds(monkeypatch)
    _load(pair)
    _load(pair)
    assert len(builds) == 2  # nothing known about the source: never trusted
    mark = variant_store.built_from(tmp_path / "nowhere", recipe="x")
    assert mark["source"] is None and not variant_store.is_complete(tmp_path / "tiny-draft.int8", mark)


def test_stored_files_are_listed_with_size_and_hash(tiny_pair, tmp_path):
    pair = _cached_pair(tiny_pair, tmp_path)
    _load(pair)
    folder = tmp_path / "tiny-draft.int8"
    marker = json.loads((folder / "complete.json").read_text())
    assert set(marker["files"]) == {"variant.safetensors", "layout.json"}
    for name, entry in marker["files"].items():
        assert entry == {"size": (folder / name).stat().st_size, "sha256": variant_store.file_digest(folder / name)}
    assert set(marker["built_from"]["versions"]) == {"torch", "transformers", "safetensors"}
    assert marker["built_from"]["source"] == {"sha256": "tiny", "format": 1}
