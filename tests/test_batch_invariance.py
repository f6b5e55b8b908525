"""Batch invariance (specdec/kernels/batch_invariant.py): a row's logits are the same bits alone (a
one-token pass, as plain decoding runs it) and inside a check of 2, 6 or 16 rows, on the eager runner
(DynamicCache, no mask for a one-token pass) and the static runner (a preallocated cache, a mask over
its capacity, fixed shapes), for every target kernel that claims it (w8a8, w4a8, int8, the dense target
in fp32); so greedy speculative output on w8a8 is plain output bit for bit.

The kernels (specdec/kernels/csrc/attention_rows.cpp, linear_rows.cpp) are checked against torch and
for the property itself, row by row; the whole target on tiny-random (fp32 around the quantized
layers) and on the embedded pair in fp32 and bf16 (skipped where it is not converted)."""

import pytest
import torch
import torch.nn.functional as F

from specdec.core.config import GenerationConfig
from specdec.core.runners.eager_model import CachedModel
from specdec.core.runners.static_model import StaticModel
from specdec.kernels import w8a8_build
from specdec.kernels.attention import PATH_ENV, ROWS, row_attention, rows_path
from specdec.kernels.cpu_linear import linear_for
from specdec.models.machine import cpu_flags

pytestmark = pytest.mark.skipif(not w8a8_build.available()[0], reason=w8a8_build.unavailable_reason() or "")
AVX2, AVX512 = w8a8_build.PATHS["avx2"], w8a8_build.PATHS["avx512"]
needs_avx512 = pytest.mark.skipif("avx512f" not in cpu_flags(), reason="the attention's AVX-512 path needs a CPU with AVX-512")

CHECKS = (2, 6, 16)


class Heads(torch.nn.Module):
    num_key_value_groups = 6


def attention(q, k, v, mask=None):
    w8a8_build.load()
    return row_attention(Heads(), q, k, v, mask)[0]


def qkv(length: int, cached: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 12, length, 128, generator=g).to(dtype)  # 12 query heads, 2 key/value heads
    k, v = (torch.randn(1, 2, cached + length, 128, generator=g).to(dtype) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("length", [1, 6])
def test_the_kernel_computes_attention(dtype, length):
    q, k, v = qkv(length, 37, dtype)
    causal = torch.ones(length, 37 + length, dtype=torch.bool).tril(37)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=causal, enable_gqa=True).transpose(1, 2)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(attention(q, k, v).float(), want, rtol=tol, atol=tol)  # no mask: causal
    torch.testing.assert_close(attention(q, k, v, causal[None, None]).float(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_gets_the_same_bits_alone_in_a_check_and_over_a_masked_capacity(dtype):
    """Row i of a 16-row check (causal, no mask) against the same row alone over exactly its keys, and
    over a longer cache with a mask hiding the slots past it (the static runner's pass), whose hidden
    slots hold garbage."""
    q, k, v = qkv(16, 50, dtype)
    check = attention(q, k, v)  # (1, 16, 12, 128)
    capacity = 96
    kc, vc = (torch.cat([t, torch.randn(1, 2, capacity - t.shape[2], 128).to(dtype)], dim=2) for t in (k, v))
    slots = torch.arange(capacity)
    for i in range(16):
        alone = attention(q[:, :, i : i + 1], k[:, :, : 51 + i], v[:, :, : 51 + i])
        assert torch.equal(alone, check[:, i : i + 1]), f"row {i}"
        masked = attention(q[:, :, i : i + 1], kc, vc, (slots <= 50 + i)[None, None, None])
        assert torch.equal(masked, alone), f"row {i}, masked"


@needs_avx512
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads, head_dim", [((12, 2), 128), ((14, 2), 64), ((3, 1), 24), ((16, 1), 13), ((2, 2), 40)])
def test_the_avx512_path_gets_the_avx2_paths_bits(dtype, heads, head_dim):
    """Odd groups (a head alone after the pairs), head sizes with 8 or fewer columns past the last 16,
    keys past the last 16, masked and causal passes, one row and a check."""
    w8a8_build.load()
    g = torch.Generator().manual_seed(1)
    (h, kv), op = heads, torch.ops.specdec.attention_rows
    for length, cached in ((1, 0), (1, 36), (4, 200), (6, 13)):
        q = (3 * torch.randn(1, h, length, head_dim, generator=g)).to(dtype)
        k, v = (torch.randn(1, kv, cached + length, head_dim, generator=g).to(dtype) for _ in range(2))
        mask = torch.rand(1, 1, length, cached + length, generator=g) > 0.3
        mask[0, 0, torch.arange(length), cached + torch.arange(length)] = True  # each row sees itself
        for m in (None, mask):
            wide, narrow = op(q, k, v, m, head_dim**-0.5, AVX512), op(q, k, v, m, head_dim**-0.5, AVX2)
            assert torch.equal(wide, narrow), (length, cached, m is None)


@needs_avx512
def test_the_paths_can_be_told_apart():
    """The comparison above sees a small difference: one key value moved by 1e-3 changes the output."""
    w8a8_build.load()
    q, k, v = qkv(1, 40)
    moved = k.clone()
    moved[0, 1, 7, 3] += 1e-3
    op = torch.ops.specdec.attention_rows
    assert not torch.equal(op(q, k, v, None, 0.1, AVX512), op(q, moved, v, None, 0.1, AVX2))


def test_the_attention_path_is_chosen_by_its_variable(monkeypatch):
    monkeypatch.delenv(PATH_ENV, raising=False)
    assert rows_path() == w8a8_build.PATHS["auto"]
    monkeypatch.setenv(PATH_ENV, "avx2")
    assert rows_path() == AVX2
    for wrong in ("amx", "sse"):
        monkeypatch.setenv(PATH_ENV, wrong)
        with pytest.raises(ValueError, match=PATH_ENV):
            rows_path()


@pytest.mark.parametrize("k", [64, 1536, 1541])  # 1541: columns past the last multiple of 8
def test_fixed_order_products_are_the_product_and_the_same_bits_alone(k):
    w8a8_build.load()
    g = torch.Generator().manual_seed(0)
    x, w, bias = torch.randn(16, k, generator=g), torch.randn(203, k, generator=g) * 0.05, torch.randn(203, generator=g)
    check = torch.ops.specdec.linear_rows(x, w, bias)  # (16, 203)
    torch.testing.assert_close(check, x @ w.T + bias, rtol=1e-5, atol=1e-5)
    for rows in ([0], [3], [5, 6], [1, 2, 3, 4, 5, 6]):
        assert torch.equal(torch.ops.specdec.linear_rows(x[rows], w, bias), check[rows]), rows
    assert torch.ops.specdec.linear_rows(x[:0], w, None).shape == (0, 203)


def test_other_inputs_fall_back_to_packed_attention():
    q, k, v = qkv(2, 5, torch.float16)
    out = attention(q, k, v)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=torch.ones(2, 7, dtype=torch.bool).tril(5),
                                          enable_gqa=True).transpose(1, 2)
    torch.testing.assert_close(out.float(), want, rtol=1e-2, atol=1e-2)


# --- the whole target ------------------------------------------------------------------------------


def wrapped(model, pair, runner: str, positions: int):
    linear = linear_for(model)  # as a run builds it: fixed-order fp32 products for a batch-invariant model
    if runner == "eager":
        return CachedModel(model, pair.vocab_size, linear)
    static = StaticModel(model, pair.vocab_size, linear)
    static.reserve(positions)
    return static


def rows_alone_and_in_checks(model, pair, ids: list[int], prefix: int, runner: str) -> list[str]:
    """After `prefix` cached positions: the logits of each of the next max(CHECKS) tokens from a
    one-token pass (fed one after another) and from checks of 2, 6 and 16; the rows that differ."""
    lm = wrapped(model, pair, runner, len(ids) + 40)
    lm.prefill(torch.tensor(ids[:prefix]))
    feed = torch.tensor(ids[prefix : prefix + max(CHECKS)])
    alone = torch.cat([lm.forward(feed[i : i + 1], last_only=False) for i in range(len(feed))])  # (16, V)
    differ = []
    for n in CHECKS:
        lm.crop(prefix)
        check = lm.forward(feed[:n], last_only=False)  # (n, V)
        differ += [f"row {i} of a check of {n}" for i in range(n) if not torch.equal(check[i], alone[i])]
    return differ


@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("kernel", ["w8a8", "w4a8", "int8", "dense"])  # dense: the target as loaded, fp32 here
def test_the_tiny_target_is_batch_invariant(tiny_pair, kernel, runner):
    from specdec.kernels.target_kernels import kernel_target

    model = kernel_target(tiny_pair, kernel)
    assert model.config._attn_implementation == ROWS
    ids = tiny_pair.tokenizer.encode("def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i, i * i)\n" * 2)
    assert rows_alone_and_in_checks(model, tiny_pair, ids, 24, runner) == []


def test_making_one_model_batch_invariant_leaves_the_others_as_they_were(tiny_pair):
    """Each built model has a config of its own: the attention of one is not switched through another's."""
    from specdec.kernels.attention import PACKED
    from specdec.kernels.target_kernels import kernel_target

    q4k, w8a8 = kernel_target(tiny_pair, "q4k"), kernel_target(tiny_pair, "w8a8")  # q4k: not batch-invariant
    assert w8a8.config is not tiny_pair.target.config and q4k.config is not tiny_pair.target.config
    assert w8a8.config._attn_implementation == ROWS and q4k.config._attn_implementation == PACKED
    assert linear_for(kernel_target(tiny_pair, "dense")).__name__ == "FixedOrderLinear"  # fp32: fixed-order products


def test_the_comparison_sees_a_pass_that_depends_on_its_rows(tiny_pair, monkeypatch):
    """The check above can fail: an attention that adds a trace of the query length breaks it."""
    from transformers import AttentionInterface

    from specdec.kernels.target_kernels import kernel_target

    model = kernel_target(tiny_pair, "w8a8")

    def coupled(module, query, *args, **kwargs):
        out, weights = row_attention(module, query, *args, **kwargs)
        return out + 1e-6 * query.shape[2], weights

    monkeypatch.setitem(AttentionInterface._global_mapping, ROWS, coupled)
    ids = tiny_pair.tokenizer.encode("def add(a, b):\n    return a + b\n" * 4)
    assert rows_alone_and_in_checks(model, tiny_pair, ids, 12, "eager")


# --- the embedded pair -----------------------------------------------------------------------------

# Three prompts of our own, in none of assets/: code, prose, a translation.
PROMPTS = (
    "Write a Python function `merge_intervals(intervals)` that merges overlapping closed intervals and returns them sorted.",
    "In three sentences, explain to a new gardener why compost needs both green and brown material.",
    "Translate into French: The train to the coast leaves at seven, so pack the sandwiches tonight.",
)


@pytest.fixture(scope="module", params=["fp32", "bf16"], ids=["glue_fp32", "glue_bf16"])
def real_pair(request):
    """The embedded pair with its w8a8 target, its other parts in fp32 (an AVX2 CPU's glue) or bf16
    (an AVX-512 BF16 CPU's); load_pair keeps one pair per process, so the fp32 tests run together."""
    from specdec.models import bundle
    from specdec.models.pair import load_pair
    from specdec.models.presets import DEFAULT_PAIR

    if not bundle.is_converted():
        pytest.skip("embedded pair not converted: python -m specdec prepare")
    return load_pair(DEFAULT_PAIR, dtype=request.param)


@pytest.mark.all_threads
@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("kernel", ["w8a8", "w4a8", "int8", "dense"])
def test_the_embedded_target_is_batch_invariant(real_pair, kernel, runner):
    from specdec.kernels.batch_invariant import invariant_kernel
    from specdec.kernels.target_kernels import kernel_target, release

    if not invariant_kernel(kernel, real_pair.dtype_name):
        pytest.skip(f"{kernel} in {real_pair.dtype_name} is not batch-invariant (oneDNN's bf16 products)")
    release(real_pair, keep=kernel)  # one kernel's model at a time: the pair in fp32 is large
    model = kernel_target(real_pair, kernel)
    ids = real_pair.encode_prompt(PROMPTS[0] + "\n" + PROMPTS[1], chat=True, max_new_tokens=0)
    assert rows_alone_and_in_checks(model, real_pair, ids, len(ids) - 16, runner) == []


@pytest.mark.all_threads
@pytest.mark.parametrize("kernel", ["w8a8", "w4a8"])
@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("prompt", PROMPTS, ids=["code", "prose", "translation"])
def test_greedy_speculative_equals_plain_on_w8a8_bit_for_bit(real_pair, prompt, runner, kernel):
    from specdec.engines.ours import OurSource
    from specdec.kernels.target_kernels import release

    release(real_pair, keep=kernel)
    config = GenerationConfig(k=5, max_new_tokens=32, target_kernel=kernel, runner=runner)
    result = OurSource(real_pair, config).side_by_side(prompt, plain=True)
    spec = [t for e in result.spec_events for t in e.emitted]
    plain = [t for e in result.plain_events for t in e.emitted]
    assert spec == plain, result.difference
    assert result.spec.accepted_share > 0.2  # drafts were accepted: checks of several rows decided the text
