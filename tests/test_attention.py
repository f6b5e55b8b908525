"""The attention paths of specdec/kernels/attention.py compute what transformers' attention does,
and a model runs its device's path, set where it is made or moved (`set_attention`), never by a runner.

CUDA's path is tested here on CPU tensors: its choice is a function of the device type, and the
device check is patched to say "cuda"."""

import copy

import pytest
import torch
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import eager_attention_forward

from specdec.core.runners import runner_model
from specdec.core.runners.eager_model import CachedModel
from specdec.core.runners.static_model import StaticModel
from specdec.kernels import attention, w8a8_build
from specdec.kernels.attention import GROUPED, PACKED, ROWS, attention_for, grouped_sdpa, packed_sdpa, set_attention


class Heads(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


def heads(length: int, cached: int = 9, masked: bool = False, seed: int = 0):
    """query (2, 6, L, 16) over 2 key/value heads of cached + L positions, and the causal mask
    (2, 1, L, cached + L), the second sequence left-padded by 3 when `masked`."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 6, length, 16, generator=g)
    k, v = (torch.randn(2, 2, cached + length, 16, generator=g) for _ in range(2))
    mask = torch.ones(length, cached + length, dtype=torch.bool).tril(cached)[None, None].repeat(2, 1, 1, 1)
    if masked:
        mask[1, :, :, :3] = False
    return q, k, v, mask


SCALING = 0.3  # not the default 1 / sqrt(16): the scaling transformers passes is the one used


def eager(q, k, v, mask):
    """transformers' eager attention (repeated key/value heads, an additive mask) -> (B, L, H, D)."""
    additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    return eager_attention_forward(Heads().eval(), q, k, v, additive, scaling=SCALING)[0]


@pytest.mark.parametrize("length", [1, 2, 6])
@pytest.mark.parametrize("masked", [False, True])
def test_packed_rows_equal_attention_per_head(length, masked):
    q, k, v, mask = heads(length, masked=masked)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    got, weights = packed_sdpa(Heads(), q, k, v, mask if masked or length == 1 else None)
    assert weights is None and got.shape == (2, length, 6, 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("function", [grouped_sdpa, packed_sdpa], ids=["cuda", "cpu"])
@pytest.mark.parametrize("length", [1, 2, 6])
@pytest.mark.parametrize("masked", [False, True])
def test_each_device_path_equals_eager_attention_with_a_mask(function, length, masked):
    """A one-token pass and a check of several rows over cached keys, the mask given as transformers
    gives it (the static runner always gives one), the second sequence left-padded or not."""
    q, k, v, mask = heads(length, masked=masked)
    got, _ = function(Heads(), q, k, v, mask, dropout=0.0, scaling=SCALING)
    torch.testing.assert_close(got, eager(q, k, v, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("function", [grouped_sdpa, packed_sdpa], ids=["cuda", "cpu"])
@pytest.mark.parametrize("length, cached", [(1, 9), (7, 0)], ids=["one-token", "prompt"])
def test_each_device_path_equals_eager_attention_without_a_mask(function, length, cached):
    """Where transformers leaves the mask out (causal suffices): CUDA's path hands grouped heads to torch."""
    q, k, v, mask = heads(length, cached)
    got, _ = function(Heads(), q, k, v, None, dropout=0.0, scaling=SCALING)
    torch.testing.assert_close(got, eager(q, k, v, mask), rtol=1e-5, atol=1e-6)


def test_the_choice_is_the_device_type():
    assert attention_for("cpu") == PACKED and attention_for("cuda") == GROUPED and attention_for("mps") == "sdpa"


def tiny_model() -> Qwen2ForCausalLM:
    """fp32, random: 6 query heads over 2 key/value heads, transformers' eager attention."""
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=96, intermediate_size=128, num_hidden_layers=2, num_attention_heads=6,
                         num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.2,
                         attn_implementation="eager")
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture
def as_cuda(monkeypatch):
    """Every model's device reads as CUDA to the attention choice (its tensors stay on the CPU)."""
    monkeypatch.setattr(attention, "device_type", lambda model: "cuda")


def passes(model_lm, ids: torch.Tensor) -> list[torch.Tensor]:
    """A prompt of 5, a one-token pass, a check of 4 rows, then (rolled back by 2) a check of 3."""
    model_lm.prefill(ids[:5])
    out = [model_lm.forward(ids[5:6], last_only=False), model_lm.forward(ids[6:10], last_only=False)]
    model_lm.crop(8)
    return [*out, model_lm.forward(ids[8:11], last_only=False)]


@pytest.mark.parametrize("runner_class", [StaticModel, CachedModel], ids=["static", "eager"])
def test_a_model_on_cudas_path_gives_eager_attentions_logits(as_cuda, runner_class):
    """The whole model in fp32: the static runner (a mask over the whole preallocated cache, padded
    passes) and the eager runner (no mask for the prompt and one token) on CUDA's attention, against
    the same weights on transformers' eager attention over a DynamicCache."""
    reference = tiny_model()
    moved = copy.deepcopy(reference)
    assert set_attention(moved) == GROUPED == moved.config._attn_implementation  # the path of its (patched) device
    ids = torch.tensor([5, 9, 17, 33, 2, 8, 40, 41, 42, 7, 3])
    model_lm = runner_class(moved, 64)
    if runner_class is StaticModel:
        model_lm.reserve(32)
    want = passes(CachedModel(reference, 64), ids)
    for got, expected in zip(passes(model_lm, ids), want, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_a_pair_built_on_the_cpu_and_moved_runs_cudas_path(monkeypatch):
    """As on ZeroGPU: built on the CPU (the packed path), then moved by start-up's `place`, which sets
    CUDA's path; a runner taking the model leaves its attention as it is."""
    from specdec.models.pair import build_pair
    from specdec.serving.startup import place

    pair = build_pair("tiny-random", device="cpu", dtype="fp32")
    assert pair.target.config._attn_implementation == PACKED == pair.draft.config._attn_implementation
    monkeypatch.setattr(attention, "device_type", lambda model: "cuda")  # the move, as the choice sees it
    for runner in ("eager", "static", "compiled"):
        runner_model(runner, pair.target, pair.vocab_size)
        assert pair.target.config._attn_implementation == PACKED, runner  # a runner sets nothing
    place(pair, pair.device)
    assert pair.target.config._attn_implementation == GROUPED == pair.draft.config._attn_implementation


def test_the_pair_runs_its_devices_attention_and_a_check_equals_the_same_rows_without_a_cache(tiny_pair):
    """On the CPU the packed path; on a GPU (scripts/gpu_check.sh) CUDA's, on CUDA's kernels."""
    model = tiny_pair.target
    # ROWS once a run made the fp32 target batch-invariant
    assert model.config._attn_implementation in (attention_for(model.device.type), ROWS)
    ids = torch.tensor([[5, 9, 17, 33, 2, 8, 40, 41, 42]], device=model.device)
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :5], cache=cache, use_cache=True)
        check = model(input_ids=ids[:, 5:], cache=cache, use_cache=True).logits[0]  # (4, V) over 5 cached positions
        full = model(input_ids=ids).logits[0, 5:]  # the same positions without a cache
    torch.testing.assert_close(check, full, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not w8a8_build.available()[0], reason=w8a8_build.unavailable_reason() or "")
def test_a_batch_invariant_model_runs_the_rows_on_the_cpu_and_its_devices_path_elsewhere(monkeypatch):
    """The rows where the model is batch-invariant and they run (a CPU with the kernel library);
    moved to CUDA, CUDA's path; back on the CPU, the rows again."""
    from specdec.kernels.batch_invariant import is_batch_invariant, make_batch_invariant

    model = tiny_model()
    assert set_attention(model) == PACKED and set_attention(model, invariant=True) == ROWS
    model.set_attn_implementation("eager")
    assert make_batch_invariant(model) and is_batch_invariant(model) and model.config._attn_implementation == ROWS
    runner_model("static", model, 64)
    assert model.config._attn_implementation == ROWS  # a runner sets nothing
    monkeypatch.setattr(attention, "device_type", lambda model: "cuda")
    assert set_attention(model, invariant=True) == GROUPED == model.config._attn_implementation
    monkeypatch.undo()
    assert set_attention(model, invariant=True) == ROWS == model.config._attn_implementation


def test_a_module_without_transformers_attention_switch_is_left_as_it_is():
    assert set_attention(torch.nn.Linear(2, 2)) is None
