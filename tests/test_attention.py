"""Packed grouped-query attention (specdec/models/attention.py) computes what transformers' sdpa does."""

import pytest
import torch
from transformers import DynamicCache

from specdec.kernels.batch_invariant import NAME as ROWS
from specdec.models.attention import NAME, packed_sdpa


class Heads(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


@pytest.mark.parametrize("length", [1, 2, 6])
@pytest.mark.parametrize("masked", [False, True])
def test_packed_rows_equal_attention_per_head(length, masked):
    g = torch.Generator().manual_seed(0)
    cached = 9
    q = torch.randn(2, 6, length, 16, generator=g)  # 6 query heads, 2 key/value heads
    k, v = (torch.randn(2, 2, cached + length, 16, generator=g) for _ in range(2))
    causal = torch.ones(length, cached + length, dtype=torch.bool).tril(cached)
    mask = causal[None, None].repeat(2, 1, 1, 1)
    if masked:
        mask[1, :, :, :3] = False  # the second sequence is left-padded
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    got, weights = packed_sdpa(Heads(), q, k, v, mask if masked or length == 1 else None)
    assert weights is None and got.shape == (2, length, 6, 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_pair_runs_packed_attention_and_a_check_equals_one_token_passes(tiny_pair):
    model = tiny_pair.target
    assert model.config._attn_implementation in (NAME, ROWS)  # ROWS once a run made the fp32 target batch-invariant
    ids = torch.tensor([[5, 9, 17, 33, 2, 8, 40, 41, 42]])
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :5], cache=cache, use_cache=True)
        check = model(input_ids=ids[:, 5:], cache=cache, use_cache=True).logits[0]  # (4, V) over 5 cached positions
        full = model(input_ids=ids).logits[0, 5:]  # the same positions without a cache
    torch.testing.assert_close(check, full, rtol=1e-5, atol=1e-5)
