"""The W4A8 kernel (specdec/kernels/w4a8.py, csrc/w4a8.cpp): the exact integer arithmetic it promises
on both instruction-set paths, a row's output independent of the other rows of its pass, the error
against the dequantized Q4_K weights within its bound, the w4a8 target exact under speculation on both
runners, rejection sampling keeping its distribution, and a machine that cannot run it told so in one
line."""

from dataclasses import replace

import pytest
import torch
from scipy.stats import chisquare

from tests.support.runs import run_checked, tokens
from specdec.core.config import GenerationConfig
from specdec.kernels import device_offer, q4k, target_kernels, w8a8_build
from specdec.kernels.w4a8 import PATHS, RECORD, W4A8Linear, pack, reference
from specdec.kernels.w8a8 import W8A8Linear
from specdec.models.built import Built

CPU = torch.device("cpu")
if not w8a8_build.available(CPU)[0]:
    pytest.skip(w8a8_build.unavailable_for("w4a8", CPU), allow_module_level=True)
ON_THIS_CPU = [p for p in ("avx2", "avx512", "amx") if p in w8a8_build.paths("w4a8")]
# Shapes: K not a multiple of 32 or 256, N not a multiple of 32 (a tile), several super-blocks, the target's MLP shape.
SHAPES = [(70, 37), (16, 256), (100, 300), (8960, 1536)]
PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"


def layer(n: int, k: int, seed: int = 0, bias: bool = False, path: str = "auto") -> tuple[W4A8Linear, torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    blocks = q4k.quantize(torch.randn(n, k, generator=g) * 0.05)  # (n, ceil(k / 256) * 144) Q4_K bytes
    b = torch.randn(n, generator=g) if bias else None
    return W4A8Linear(blocks, k, b, CPU, path=PATHS[path]), blocks, b


def activations(m: int, k: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    x[:, 0] *= 20  # an outlier channel, as Qwen2.5's activations have
    return x.to(dtype)


def test_the_record_holds_codes_scales_and_minima_where_the_kernel_reads_them():
    g = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (40, 512), dtype=torch.uint8, generator=g)
    sc, m = (torch.randint(0, 64, (40, 2, 8), dtype=torch.uint8, generator=g) for _ in range(2))
    d, dmin = (torch.rand(40, 2, generator=g).half() for _ in range(2))
    packed = pack(q, sc, m, d, dmin)
    assert packed.shape == (2, 2, RECORD) and RECORD == 4736 and packed.dtype == torch.uint8
    record = packed[1, 1]  # channels 32-63 (32-39 real), columns 256-511
    for c in (1, 5):  # channels 33 and 37
        j, p, i = 5, 2, 1
        byte = record[((j * 4 + p) * 32 + c) * 4 + i]
        assert byte & 15 == q[32 + c, 256 + 32 * j + 4 * p + i] and byte >> 4 == q[32 + c, 256 + 32 * j + 16 + 4 * p + i]
        assert record[4096 + 32 * j + c] == sc[32 + c, 1, j] and record[4352 + 32 * j + c] == m[32 + c, 1, j]
        assert record[4608 + 2 * c : 4610 + 2 * c].view(torch.float16) == d[32 + c, 1]
        assert record[4672 + 2 * c : 4674 + 2 * c].view(torch.float16) == dmin[32 + c, 1]
    first = packed[0, 0]  # channels 16-31 fill the second 64-byte vector of each (j, p)
    assert first[64 + 4 * 4 + 3] & 15 == q[20, 3] and first[64] >> 4 == q[16, 16] and first[128] & 15 == q[0, 4]
    assert (record[4096:4608].reshape(16, 32)[:, 8:] == 0).all() and (record[4608:].reshape(2, 32, 2)[:, 8:] == 0).all()  # past N: zero


@pytest.mark.parametrize("path", ON_THIS_CPU)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k", SHAPES[:3])
def test_kernel_is_the_integer_arithmetic_bit_for_bit(path, dtype, n, k):
    """The same bits as `reference`: the sums over sub-blocks, their 6-bit scales and minima in torch's
    int64, then the same float operations in the same order."""
    for bias in (False, True):
        module, blocks, b = layer(n, k, bias=bias, path=path)
        x = activations(9, k, dtype)
        y = module(x)
        assert y.dtype == dtype and y.shape == (9, n)
        assert torch.equal(y, reference(x, blocks, k, b))


@pytest.mark.skipif("avx512" not in ON_THIS_CPU, reason="this CPU has no AVX-512 VNNI: only the AVX2 path runs here")
@pytest.mark.parametrize("n,k", SHAPES)
def test_the_forced_avx2_path_gives_the_avx512_paths_bits(n, k, monkeypatch):
    fast, blocks, b = layer(n, k, bias=True, path="avx512")
    monkeypatch.setenv("SPECDEC_W4A8_PATH", "avx2")  # read when a layer is built
    plain = W4A8Linear(blocks, k, b, CPU)
    assert plain.path == PATHS["avx2"]
    for dtype in (torch.float32, torch.bfloat16):
        x = activations(11, k, dtype)
        assert torch.equal(fast(x), plain(x))


@pytest.mark.skipif("amx" not in ON_THIS_CPU, reason="no AMX-INT8 here (the CPU, its OS or the compiler has none): the VNNI and AVX2 paths run")
@pytest.mark.parametrize("n,k", SHAPES)
def test_amx_gives_the_vnni_paths_bits_for_every_row_count(n, k):
    """The AMX path unpacks the codes once per half super-block for all its row tiles of 16: a check of 2,
    a partial last tile (17, 40 rows) and a prompt of several tiles give each row the VNNI path's bits.
    Auto runs AMX from 16 rows and VNNI below, so every row keeps its bits across that crossing too."""
    amx, blocks, b = layer(n, k, bias=True, path="amx")
    vnni = W4A8Linear(blocks, k, b, CPU, path=PATHS["avx512"])
    auto = W4A8Linear(blocks, k, b, CPU, path=PATHS["auto"])
    x = activations(40, k, torch.bfloat16)
    alone = torch.cat([vnni(x[i : i + 1]) for i in range(40)])
    for rows in (1, 2, 15, 16, 17, 40):
        assert torch.equal(amx(x[:rows]), alone[:rows]), rows
        assert torch.equal(auto(x[:rows]), alone[:rows]), rows


@pytest.mark.parametrize("path", ON_THIS_CPU)
@pytest.mark.parametrize("n,k", SHAPES)
def test_a_row_gives_the_same_bits_alone_and_in_a_check_of_2_6_or_16(path, n, k):
    """And in a prompt of 37 rows: the AVX2 path takes 16 rows a sweep of a tile, so that is three sweeps,
    the last of 5 rows (a block of 4 and one of 1)."""
    module, _, _ = layer(n, k, bias=True, path=path)
    x = activations(37, k, torch.bfloat16)
    alone = torch.cat([module(x[i : i + 1]) for i in range(37)])
    for rows in (2, 6, 16, 37):
        assert torch.equal(module(x[:rows]), alone[:rows]), rows
    assert torch.equal(module(x[:16].reshape(2, 8, k)), alone[:16].reshape(2, 8, n))  # (batch, tokens, K) as the model passes it


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_error_against_the_dequantized_weights_is_within_half_an_activation_step(dtype):
    """Against x @ W.T with the float x and W the GGUF's values of the Q4_K bytes, the only
    approximation is rounding x to its block's grid (|x - qx * sx| <= sx / 2): the weights are exact."""
    n, k = 64, 1024
    module, blocks, _ = layer(n, k)
    x = activations(6, k, dtype)
    weight = q4k.dequantize(blocks, k)  # (N, K) float32, as GGUF defines the values
    want = x.float() @ weight.T
    from specdec.kernels.w8a8 import quantize_blocks

    _, sx = quantize_blocks(x)  # (M, K / 128)
    bound = sx / 2 @ weight.abs().reshape(n, -1, 128).sum(2).T  # (M, N)
    err = (module(x).float() - want).abs()
    assert (err <= bound + want.abs() * (2**-8 if dtype == torch.bfloat16 else 1e-5) + 1e-5).all()
    assert err.max() > 0.01 * bound.max()  # the activations really are int8


def test_zero_rows_give_the_bias_and_other_float_dtypes_are_computed_from_fp32():
    module, blocks, b = layer(40, 64, bias=True)
    x = torch.zeros(3, 64)
    x[1] = torch.randn(64)
    y = module(x)
    assert torch.equal(y[0], b) and torch.equal(y[2], b) and torch.equal(y[1], reference(x, blocks, 64, b)[1])
    assert torch.equal(module(x.half()), module(x.half().float()).half())


def test_a_compiled_call_traces_the_op_by_its_shape_and_gives_its_bits():
    lin, _, _ = layer(70, 37, bias=True)
    compiled = torch.compile(lambda x: lin(x), fullgraph=True, dynamic=False)
    x = activations(3, 37, torch.float32)
    assert torch.equal(compiled(x), lin(x))


# --- the target built on it ------------------------------------------------------------------------


def test_the_w4a8_target_runs_q4k_weights_in_w4a8_and_the_rest_in_w8a8(tiny_pair):
    model = target_kernels.kernel_target(tiny_pair, "w4a8")
    assert isinstance(model.lm_head, W4A8Linear) and isinstance(model.model.layers[0].mlp.down_proj, W4A8Linear)
    assert isinstance(model.model.embed_tokens, q4k.Q4KEmbedding)
    assert not [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert model.dtype == tiny_pair.dtype and target_kernels.kernel_target(tiny_pair, "w4a8") is model
    # its weights are the q4k kernel's: the same Q4_K bytes, only the activations differ
    q4 = target_kernels.kernel_target(tiny_pair, "q4k")
    assert torch.equal(model.lm_head.packed, pack(*q4k.parts(q4k.quantize(tiny_pair.target.lm_head.weight))))
    ids = torch.tensor([[5, 9, 17, 33]])
    with torch.inference_mode():
        ours, theirs, dense = (m(input_ids=ids).logits for m in (model, q4, tiny_pair.target))
    # tiny-random loses much in 4 bits (logits move by about 3); int8 activations move them far less
    assert (ours - theirs).abs().max() < 0.25 * (theirs - dense).abs().max()


def test_layers_left_dense_by_the_gguf_run_in_w8a8(tiny_pair):
    """A GGUF's Q6_K tensors reach assembly dense (gguf_q4k_state dequantizes them): they run on the
    W8A8 kernel, int8 per channel from those values."""
    layout, tensors = target_kernels.dense_q4k_state(tiny_pair.target)
    for name in ("lm_head", "model.layers.0.mlp.down_proj"):  # as the Q4_K_M GGUF keeps them (Q6_K)
        del layout[name], tensors[f"{name}.blocks"]
        tensors[f"{name}.weight"] = tiny_pair.target.get_submodule(name).weight.detach().clone()
    model = target_kernels.assemble_q4k(tiny_pair.target.config, layout, tensors, torch.float32, torch.float32, CPU, "w4a8")
    assert isinstance(model.lm_head, W8A8Linear) and isinstance(model.model.layers[0].mlp.down_proj, W8A8Linear)
    assert isinstance(model.model.layers[1].mlp.down_proj, W4A8Linear)
    from specdec.kernels.quant import quantize
    from specdec.kernels.w8a8 import pack as pack_w8a8

    weight = tensors["lm_head.weight"]
    assert torch.equal(model.lm_head.packed, pack_w8a8(quantize(weight, 8).q)) and torch.equal(model.lm_head.scale, quantize(weight, 8).scale)
    with torch.inference_mode():
        assert model(input_ids=torch.tensor([[1, 2, 3]])).logits.isfinite().all()


def test_the_w4a8_draft_runs_its_layers_in_w4a8_and_its_head_in_w8a8(tiny_pair):
    from specdec.kernels import variants
    from specdec.kernels.variant_store import SubsetHead

    draft = variants.draft_model(tiny_pair, "w4a8")
    assert isinstance(draft.model.layers[0].self_attn.q_proj, W4A8Linear) and isinstance(draft.lm_head, W8A8Linear)
    assert isinstance(variants.draft_model(tiny_pair, "w4a8-v16k").lm_head, SubsetHead)
    ids = torch.tensor([[5, 9, 17, 33]])
    with torch.inference_mode():
        assert draft(input_ids=ids).logits.isfinite().all()


def test_the_stored_w4a8_draft_loads_back_the_same_model(tiny_pair, tmp_path, monkeypatch):
    import json

    from specdec.kernels import variants

    draft_dir = tmp_path / "tiny-draft"
    tiny_pair.draft.config.save_pretrained(draft_dir)
    (draft_dir / "complete.json").write_text(json.dumps({"sha256": "tiny", "format": 1}))
    built = variants.draft_model(replace(tiny_pair, draft_dir=draft_dir, built=Built()), "w4a8")
    layout = json.loads((tmp_path / "tiny-draft.w4a8" / "layout.json").read_text())["layout"]
    assert layout["model.layers.0.mlp.up_proj"]["cols"] == 64 and layout["lm_head"]["bits"] == 8
    monkeypatch.setattr(variants, "quantized_state", lambda *args: pytest.fail("rebuilt although stored"))
    loaded = variants.draft_model(replace(tiny_pair, draft_dir=draft_dir, built=Built()), "w4a8")  # a new process: read back
    assert loaded is not built
    ids = torch.tensor([[5, 9, 17, 33]])
    with torch.inference_mode():
        assert torch.equal(loaded(input_ids=ids).logits, built(input_ids=ids).logits)


@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("k", [2, 5])
def test_greedy_speculative_equals_plain_on_w4a8_bit_for_bit(tiny_pair, runner, k):
    plain = run_checked(tiny_pair, PROMPT, GenerationConfig(drafter="none", max_new_tokens=40, target_kernel="w4a8", runner=runner))
    spec = run_checked(tiny_pair, PROMPT, GenerationConfig(k=k, max_new_tokens=40, target_kernel="w4a8", runner=runner))
    assert tokens(spec) == tokens(plain)
    assert sum(e.accepted for e in spec) > 0 and max(len(e.emitted) for e in spec) > 1  # checks of several rows decided the text


@pytest.mark.skipif("avx512" not in ON_THIS_CPU, reason="this CPU has no AVX-512 VNNI: the test above runs the AVX2 path")
@pytest.mark.parametrize("runner", ["eager", "static"])
def test_greedy_speculative_equals_plain_on_w4a8s_avx2_path(tiny_pair, runner):
    """The same on the AVX2 path, forced in every kernel layer of the built target (its Q4_K layers and its
    W8A8 head): a check of 6 rows is one sweep of a block of 4 rows and one of 2 there."""
    target = target_kernels.kernel_target(tiny_pair, "w4a8")
    layers = [m for m in target.modules() if isinstance(m, (W4A8Linear, W8A8Linear))]
    before = [m.path for m in layers]
    try:
        for m in layers:
            m.path = PATHS["avx2"]
        plain = run_checked(tiny_pair, PROMPT, GenerationConfig(drafter="none", max_new_tokens=40, target_kernel="w4a8", runner=runner))
        spec = run_checked(tiny_pair, PROMPT, GenerationConfig(k=5, max_new_tokens=40, target_kernel="w4a8", runner=runner))
    finally:
        for m, path in zip(layers, before):
            m.path = path
    assert tokens(spec) == tokens(plain)
    assert sum(e.accepted for e in spec) > 0 and max(len(e.emitted) for e in spec) > 1


def test_rejection_sampling_keeps_the_w4a8_targets_distribution(tiny_pair):
    """The first token emitted after the prompt, drafted by the stock draft and checked by the w4a8
    target, follows the w4a8 target's own next-token distribution (chi-square; tokens expected fewer
    than 5 times pooled), and not the dense target's."""
    from specdec.core.acceptance import speculative_sample

    target = target_kernels.kernel_target(tiny_pair, "w4a8")
    ids = torch.tensor([tiny_pair.tokenizer.encode(PROMPT)])
    with torch.inference_mode():
        p = torch.softmax(target(input_ids=ids).logits[0, -1].double(), -1).float()  # (V,)
        q = torch.softmax(tiny_pair.draft(input_ids=ids).logits[0, -1].double(), -1).float()
        dense = torch.softmax(tiny_pair.target(input_ids=ids).logits[0, -1].double(), -1)  # the dense target's
    generator = torch.Generator().manual_seed(7)
    trials, counts = 4000, torch.zeros(p.shape[0])
    for _ in range(trials):  # K = 1: the first emitted token depends on p and q of the first position only
        draft = torch.multinomial(q, 1, generator=generator)
        n, token = speculative_sample(draft, torch.stack([p, p]), q[None], generator)
        counts[int(draft[0]) if int(n) == 1 else int(token)] += 1
    expected = trials * p.double()
    kept = expected >= 5
    assert kept.sum() >= 10  # a spread distribution: the test has bins to compare
    observed = [*counts[kept].tolist(), counts[~kept].sum().item()]
    wanted = [*expected[kept].tolist(), expected[~kept].sum().item()]
    assert chisquare(observed, wanted).pvalue > 1e-3
    # the same counts are told apart from another target's distribution (the dense one, which 4 bits move)
    assert chisquare(observed, [*(trials * dense[kept]).tolist(), (trials * dense[~kept]).sum().item()]).pvalue < 1e-3


# --- a machine that cannot run it -----------------------------------------------------------------


def test_unavailable_kernel_is_not_offered_and_asking_for_it_is_one_line(tiny_pair, monkeypatch, capsys):
    from specdec.__main__ import main

    monkeypatch.setattr(w8a8_build, "unavailable_reason", lambda device=None: "the w8a8 target kernel is not available here: test")
    line = "the w4a8 target kernel is not available here: test"
    offered = device_offer.target_kernels(CPU)
    assert "w4a8" not in offered.names and "q4k" in offered.names and offered.not_offered["w4a8"] == line
    assert "w4a8 (the w4a8 target kernel is not available here: test)" in offered.explain("cpu")
    with pytest.raises(ValueError) as err:
        target_kernels.kernel_target(replace(tiny_pair, built=Built()), "w4a8")
    assert str(err.value) == line
    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "x", "--max-new-tokens", "2", "--target-kernel", "w4a8"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"error: {line}"


def test_no_avx2_or_no_compiler_is_one_line_naming_w4a8(monkeypatch):
    from specdec.models import machine

    monkeypatch.setattr(w8a8_build, "compiler", lambda: None)
    assert w8a8_build.unavailable_for("w4a8") == ("the w4a8 target kernel is not available here: it is built once with a C++ "
                                                  "compiler, and none was found (install g++)")
    monkeypatch.setattr(machine, "cpu_flags", lambda: ("sse2", "avx"))
    assert w8a8_build.unavailable_for("w4a8").startswith("the w4a8 target kernel is not available here: it needs an x86 CPU with AVX2")
    assert "w4a8" not in device_offer.target_kernels(CPU).names


def test_the_page_does_not_offer_w4a8_where_the_kernel_cannot_run(monkeypatch):
    from app.advanced import TARGET_KERNEL_HELP

    assert "w4a8 = " in TARGET_KERNEL_HELP  # where it runs, the page says what it is in one line
    monkeypatch.setattr(w8a8_build, "unavailable_reason", lambda device=None: "the w8a8 target kernel is not available here: test")
    assert "w4a8" not in device_offer.target_kernels(None).names  # what the page's dropdown lists
