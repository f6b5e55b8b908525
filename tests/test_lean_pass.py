"""The eager runner's lean pass (specdec/core/runners/lean_pass.py) gives the same bits as transformers'
decoder over its DynamicCache: logits and final hidden states, for a prefill, one-token passes, a
check, after a rollback and across the cache's growth; on the tiny pair's draft (the library's
packed attention), its targets of every kernel (the rows' attention where batch-invariant), and the
embedded pair's w4a8 and w8a8 targets where it is converted, with the products the lean pass joins
(specdec/core/runners/joined_products.py) joined. scripts/gpu_check.sh runs it on a GPU too (the
tiny pair there, on the GPU's attention path)."""

import pytest
import torch

from specdec.core.config import MAX_K
from specdec.core.runners import joined_products, lean_pass
from specdec.core.runners.eager_model import CachedModel, EagerModels
from specdec.kernels import w8a8_build
from specdec.kernels.cpu_linear import linear_for

TEXT = "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i, i * i)\n" * 2


def passes(model, vocab_size: int, ids: list[int], lean: bool, positions: int) -> list[torch.Tensor]:
    """Logits and final hidden states of a run of passes over `ids`: a prefill of 20, three one-token
    passes, a check of 6, a rollback of 4, a check of 5, then one-token passes to the end."""
    lm = CachedModel(model, vocab_size, linear_for(model), lean=lean, positions=positions)
    assert lm.lean == lean
    out = []

    def feed(a: int, b: int) -> None:
        out.extend([lm.forward(torch.tensor(ids[a:b], device=model.device), last_only=False), lm.features.clone()])
        assert lm.length == b

    feed(0, 20)
    for i in range(20, 23):
        feed(i, i + 1)
    feed(23, 29)
    lm.crop(25)
    assert lm.length == 25
    feed(25, 30)
    for i in range(30, len(ids)):
        feed(i, i + 1)
    return out


def assert_same_bits(model, vocab_size: int, ids: list[int], positions: int = 256) -> None:
    assert lean_pass.supports(model)
    lean = passes(model, vocab_size, ids, True, positions)
    stock = passes(model, vocab_size, ids, False, positions)
    assert len(lean) == len(stock)
    differ = [i for i, (a, b) in enumerate(zip(lean, stock)) if not torch.equal(a, b)]
    assert differ == [], f"passes {differ} differ from transformers' path"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 5])
def test_rotate_is_transformers_rotary_bit_for_bit(dtype, n):
    from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

    g = torch.Generator().manual_seed(n)
    query, key = (torch.randn(1, n, heads * 128, generator=g).to(dtype) for heads in (12, 2))
    cos, sin = (torch.randn(1, n, 128, generator=g).to(dtype) for _ in range(2))
    want = apply_rotary_pos_emb(query.view(1, n, 12, 128).transpose(1, 2), key.view(1, n, 2, 128).transpose(1, 2), cos, sin)
    joined = torch.cat((query, key, torch.randn(1, n, 2 * 128, generator=g).to(dtype)), dim=-1)  # a joined q/k/v output
    for qk in (torch.cat((query, key), dim=-1), joined[..., : 14 * 128]):  # concatenated, or the joined output's first columns
        got = lean_pass.rotate(qk, 12, cos, sin, 128)
        assert [t.shape for t in got] == [(1, 12, n, 128), (1, 2, n, 128)]
        assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_the_draft_gets_transformers_bits(tiny_pair):
    ids = tiny_pair.tokenizer.encode(TEXT)
    assert_same_bits(tiny_pair.draft, tiny_pair.vocab_size, ids)


def test_the_cache_grows_and_keeps_its_keys(tiny_pair):
    """A cache with room for 8 positions grows at the prefill of 20 (to 20 + GROWTH) and again later."""
    ids = tiny_pair.tokenizer.encode(TEXT * 3)
    assert len(ids) > 20 + lean_pass.GROWTH
    assert_same_bits(tiny_pair.draft, tiny_pair.vocab_size, ids, positions=8)


@pytest.mark.skipif(not w8a8_build.available()[0], reason=w8a8_build.unavailable_reason() or "")
@pytest.mark.parametrize("kernel", ["w8a8", "w4a8", "int8", "dense", "q4k"])
def test_the_targets_get_transformers_bits(tiny_pair, kernel):
    """The batch-invariant kernels on the rows' attention; q4k (not batch-invariant) on packed attention."""
    from specdec.kernels.attention import PACKED, ROWS
    from specdec.kernels.target_kernels import kernel_target

    if tiny_pair.device.type != "cpu":
        pytest.skip("the batch-invariant target kernels run on a CPU")
    model = kernel_target(tiny_pair, kernel)
    assert model.config._attn_implementation == (PACKED if kernel == "q4k" else ROWS)
    assert_same_bits(model, tiny_pair.vocab_size, tiny_pair.tokenizer.encode(TEXT))


def test_a_pass_that_differs_is_seen(tiny_pair, monkeypatch):
    """The comparison above can fail: a norm that the lean pass runs differently breaks it."""
    ids = tiny_pair.tokenizer.encode(TEXT)
    real = lean_pass.decoder_pass

    def shifted(decoder, ids, cache):
        return real(decoder, ids, cache) * (1 + 2**-20)

    monkeypatch.setattr(lean_pass, "decoder_pass", shifted)
    with pytest.raises(AssertionError, match="differ from transformers' path"):
        assert_same_bits(tiny_pair.draft, tiny_pair.vocab_size, ids)


def test_the_eager_runner_runs_it_where_it_can(tiny_pair):
    """A run's models are lean, sized for the run; a model on transformers' own attention, or with a
    sliding window, keeps transformers' path."""
    import copy

    lm = EagerModels(tiny_pair.draft, tiny_pair.vocab_size).claim(object(), 700)
    assert lm.lean and lm.cache.capacity == 700 + MAX_K + 1  # a last check of MAX_K + 1 tokens fits
    stock = copy.deepcopy(tiny_pair.draft)
    stock.set_attn_implementation("sdpa")
    assert not lean_pass.supports(stock) and not CachedModel(stock, tiny_pair.vocab_size).lean
    windowed = copy.deepcopy(tiny_pair.draft)
    windowed.model.layers[0].self_attn.sliding_window = 16
    assert not lean_pass.supports(windowed)


@pytest.mark.all_threads
@pytest.mark.parametrize("kernel", ["w4a8", "w8a8"])
def test_the_embedded_targets_get_transformers_bits(kernel):
    from specdec.models import bundle
    from specdec.models.pair import load_pair
    from specdec.models.presets import DEFAULT_PAIR

    if not w8a8_build.available()[0] or not bundle.is_converted():
        pytest.skip("needs the kernel library and the embedded pair (python -m specdec prepare)")
    from specdec.kernels.target_kernels import kernel_target

    pair = load_pair(DEFAULT_PAIR)
    ids = pair.encode_prompt("In three sentences, explain why compost needs both green and brown material.", chat=True,
                             max_new_tokens=0)
    model = kernel_target(pair, kernel)
    assert_same_bits(model, pair.vocab_size, ids[:40])
    plan = joined_products.plan(model.get_decoder())  # what the lean pass ran joined
    assert all(layer.qkv is not None and layer.gate_up is not None for layer in plan)
    # w4a8: the GGUF's attn_v is Q6_K (on the w8a8 kernel) in half the layers, so there the value runs apart
    assert {layer.with_value for layer in plan} == ({True, False} if kernel == "w4a8" else {True})
