"""The W8A8 kernel (specdec/kernels/w8a8.py, csrc/w8a8.cpp): the exact integer arithmetic it promises,
a row's output independent of the other rows of its pass, both instruction-set paths bit for bit,
the error against the dequantized weights within its bound, the stored target rebuilt when broken,
and a machine that cannot run it told so in one line."""

import json
from dataclasses import replace

import pytest
import torch

from specdec.core.config import GenerationConfig
from specdec.kernels import device_offer, target_kernels, variants, w8a8_build
from specdec.kernels.quant import QuantWeight, quantize
from specdec.kernels.w8a8 import W8A8Linear, pack, reference
from specdec.models.built import Built

CPU = torch.device("cpu")
if not w8a8_build.available(CPU)[0]:
    pytest.skip(w8a8_build.unavailable_reason(CPU), allow_module_level=True)
PATHS = [p for p in ("avx2", "avx512", "amx") if p in w8a8_build.paths()]
# Shapes: K not a multiple of 4 or 64, N not a multiple of 16 or 32, and the target's MLP shape.
SHAPES = [(70, 37), (16, 4), (100, 130), (8960, 1536)]


def layer(n: int, k: int, seed: int = 0, bias: bool = False, path: str = "auto") -> tuple[W8A8Linear, QuantWeight, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    weight = quantize(torch.randn(n, k, generator=g) * 0.05, 8)
    b = torch.randn(n, generator=g) if bias else None
    from specdec.kernels.w8a8 import PATHS as CODES

    return W8A8Linear(weight, b, CPU, path=CODES[path]), weight, b


def activations(m: int, k: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    x[:, 0] *= 20  # an outlier channel, as Qwen2.5's activations have: it sets the row's scale
    return x.to(dtype)


def test_packed_layout_puts_four_columns_of_sixteen_channels_in_each_vector():
    q = torch.randint(-127, 128, (70, 37), dtype=torch.int8)
    packed = pack(q)
    assert packed.shape == (3, 10, 32, 4) and packed.dtype == torch.int8
    w = packed ^ torch.tensor(-128, dtype=torch.int8)  # stored as w XOR 0x80 (w + 128 read unsigned)
    assert w[1, 2, 5, 3] == q[32 + 5, 4 * 2 + 3] and w[2, 9, 5, 0] == q[69, 36]
    assert (w[2, :, 6:] == 0).all() and (w[:, 9, :, 1:] == 0).all()  # padding beyond N and K: w = 0
    assert packed.view(torch.uint8)[1, 2, 5, 3] == int(q[37, 11]) + 128


def test_activations_get_one_scale_per_block_of_128_columns():
    from specdec.kernels.w8a8 import BLOCK, quantize_blocks

    x = torch.randn(3, 300)
    x[1, 5] = 1000.0  # an outlier coarsens its own block only
    x[2, 128:256] = 0.0  # a zero block: scale 0, q 0
    qx, sx = quantize_blocks(x)
    assert BLOCK == 128 and qx.shape == (3, 300) and sx.shape == (3, 3)
    assert torch.equal(sx[:, 0], x[:, :128].abs().amax(1) / 127) and torch.equal(sx[:, 2], x[:, 256:].abs().amax(1) / 127)
    assert sx[1, 0] > 100 * sx[1, 1] and sx[2, 1] == 0 and (qx[2, 128:256] == 0).all()
    assert (qx.abs() <= 127).all() and (qx[1, :128].abs() == 127).sum() == 1
    assert ((qx[0, 128:256].float() * sx[0, 1] - x[0, 128:256]).abs() <= sx[0, 1] / 2 + 1e-6).all()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k", SHAPES[:3])
def test_kernel_is_the_integer_arithmetic_bit_for_bit(path, dtype, n, k):
    """y = (sum over blocks of float(sum qx * qw) * sx) * sw + bias, qx quantized per block of 128
    columns: the same bits as `reference`, which writes that arithmetic in plain torch (int64
    products, the same float operations in the same order)."""
    for bias in (False, True):
        module, weight, b = layer(n, k, bias=bias, path=path)
        x = activations(9, k, dtype)
        y = module(x)
        assert y.dtype == dtype and y.shape == (9, n)
        assert torch.equal(y, reference(x, weight, b))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n,k", SHAPES)
def test_a_row_gives_the_same_bits_alone_and_in_a_batch_of_6_or_16(path, n, k):
    """And in a prompt of 37 rows: the AVX2 path takes 16 rows a sweep of a tile, so that is three sweeps,
    the last of 5 rows (a block of 4 and one of 1)."""
    module, _, _ = layer(n, k, bias=True, path=path)
    x = activations(37, k, torch.bfloat16)
    alone = torch.cat([module(x[i : i + 1]) for i in range(37)])
    for rows in (6, 16, 37):
        assert torch.equal(module(x[:rows]), alone[:rows]), rows
    assert torch.equal(module(x[:16].reshape(2, 8, k)), alone[:16].reshape(2, 8, n))  # (batch, tokens, K) as the model passes it


@pytest.mark.skipif("avx512" not in PATHS, reason="this CPU has no AVX-512 VNNI: only the AVX2 path runs here")
@pytest.mark.parametrize("n,k", SHAPES)
def test_avx512_and_avx2_paths_agree_bit_for_bit(n, k):
    fast, _, _ = layer(n, k, bias=True, path="avx512")
    plain, _, _ = layer(n, k, bias=True, path="avx2")
    for dtype in (torch.float32, torch.bfloat16):
        x = activations(11, k, dtype)
        assert torch.equal(fast(x), plain(x))


@pytest.mark.skipif("amx" not in PATHS, reason="no AMX-INT8 here (the CPU, its OS or the compiler has none): the VNNI and AVX2 paths run")
@pytest.mark.parametrize("n,k", SHAPES)
def test_amx_gives_the_vnni_paths_bits_for_every_row_count(n, k):
    """The AMX path's tiles hold 16 rows: a check of 2, a partial last tile (17, 40 rows) and a prompt of
    several tiles give each row the VNNI path's bits. Auto runs AMX from 8 rows and VNNI below, so a
    check that crosses it still gives every row the bits it has alone."""
    amx, _, _ = layer(n, k, bias=True, path="amx")
    vnni, _, _ = layer(n, k, bias=True, path="avx512")
    auto, _, _ = layer(n, k, bias=True, path="auto")
    x = activations(40, k, torch.bfloat16)
    alone = torch.cat([vnni(x[i : i + 1]) for i in range(40)])
    for rows in (1, 2, 7, 8, 16, 17, 40):
        assert torch.equal(amx(x[:rows]), alone[:rows]), rows
        assert torch.equal(auto(x[:rows]), alone[:rows]), rows


@pytest.mark.skipif("amx" in PATHS, reason="AMX-INT8 runs here: asking for it is not refused")
def test_asking_for_amx_where_there_is_none_is_one_line():
    module, _, _ = layer(40, 64, path="amx")
    with pytest.raises(RuntimeError, match="no AMX-INT8 here"):
        module(activations(16, 64, torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_error_against_the_dequantized_weights_is_within_half_an_activation_step(dtype):
    """Against x @ (qw * sw).T with the float x, the only approximation is rounding x to its block's
    grid: each |x - qx * sx| <= sx / 2, so |error[m, n]| <= sum_b sx[m, b] / 2 * sum_{k in b} |w[n, k]|,
    plus the epilogue's float rounding (a few ulps of the output, and half a bf16 step for bf16
    outputs). With an outlier channel that bound is far below the one a scale per row would give."""
    from specdec.kernels.w8a8 import BLOCK, quantize_blocks

    n, k = 300, 1000
    module, weight, _ = layer(n, k)
    x = activations(6, k, dtype)
    x[:, 0] = 40.0  # an outlier channel in every row, about 15x the largest of the rest
    dequantized = weight.dequantize()  # (N, K) float32
    want = x.float() @ dequantized.T
    y = module(x).float()
    _, sx = quantize_blocks(x)  # (M, B)
    per_block = torch.nn.functional.pad(dequantized.abs(), (0, -k % BLOCK)).reshape(n, -1, BLOCK).sum(2)  # (N, B)
    bound = sx / 2 @ per_block.T  # (M, N)
    rounding = want.abs() * (2**-8 if dtype == torch.bfloat16 else 1e-6) + 1e-6
    err = (y - want).abs()
    assert (err <= bound + rounding).all()
    assert err.max() > 0.01 * bound.max()  # the bound is met, not vacuous: the activations really are int8
    row_bound = x.float().abs().amax(1)[:, None] / 127 / 2 * dequantized.abs().sum(1)[None, :]
    assert (bound < row_bound / 4).all()  # the outlier's coarse grid stays in its own block


def test_zero_rows_give_the_bias_and_other_float_dtypes_are_computed_from_fp32():
    module, weight, b = layer(40, 24, bias=True)
    x = torch.zeros(3, 24)
    x[1] = torch.randn(24)
    y = module(x)
    assert torch.equal(y[0], b) and torch.equal(y[2], b) and torch.equal(y[1], reference(x, weight, b)[1])
    assert torch.equal(module(x.half()), module(x.half().float()).half())


def test_one_openmp_runtime_in_the_process():
    """The library runs on torch's own OpenMP team: no second libgomp is mapped."""
    w8a8_build.load()
    with open("/proc/self/maps") as f:
        gomp = {line.split()[-1] for line in f if "libgomp" in line}
    assert len(gomp) == 1, gomp


@pytest.mark.parametrize("kernel", ["w8a8", "w4a8"])
def test_the_path_variable_is_checked(monkeypatch, kernel):
    """Each kernel of the library reads its own variable: SPECDEC_W8A8_PATH, SPECDEC_W4A8_PATH."""
    import importlib

    path_from_env, env = importlib.import_module(f"specdec.kernels.{kernel}").path_from_env, f"SPECDEC_{kernel.upper()}_PATH"
    monkeypatch.setenv(env, "avx2")
    assert path_from_env() == 1
    monkeypatch.setenv(env, "sse")
    with pytest.raises(ValueError, match=f"{env} must be one of auto, avx2, avx512, amx, got 'sse'"):
        path_from_env()


# --- the target and draft built on it ------------------------------------------------------------


def test_the_w8a8_target_runs_every_linear_layer_and_the_head_in_w8a8(tiny_pair):
    model = target_kernels.kernel_target(tiny_pair, "w8a8")
    assert isinstance(model.lm_head, W8A8Linear) and isinstance(model.model.layers[0].mlp.down_proj, W8A8Linear)
    assert not [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert model.dtype == tiny_pair.dtype  # the rest of the model keeps the pair's dtype
    draft = variants.draft_model(tiny_pair, "w8a8")
    assert isinstance(draft.model.layers[0].self_attn.q_proj, W8A8Linear)


def _cached_target(tiny_pair, tmp_path):
    target_dir = tmp_path / "tiny-target"
    tiny_pair.target.config.save_pretrained(target_dir)
    (target_dir / "complete.json").write_text(json.dumps({"sha256": "tiny target", "format": 1}))
    return replace(tiny_pair, target_dir=target_dir, built=Built())


def test_the_stored_target_is_built_once_and_rebuilt_when_truncated(tiny_pair, tmp_path, monkeypatch):
    builds, real = [], variants.quantized_state
    monkeypatch.setattr(variants, "quantized_state", lambda *args: builds.append(args) or real(*args))
    first = target_kernels.kernel_target(_cached_target(tiny_pair, tmp_path), "w8a8")
    again = target_kernels.kernel_target(_cached_target(tiny_pair, tmp_path), "w8a8")  # a new process: loaded
    assert len(builds) == 1
    stored = tmp_path / "tiny-target.w8a8" / "variant.safetensors"
    layout = json.loads((tmp_path / "tiny-target.w8a8" / "layout.json").read_text())["layout"]
    assert layout["lm_head"]["activations"] == 8 and layout["model.embed_tokens"]["kind"] == "embedding"
    cut = stored.read_bytes()[:1000]
    stored.unlink()  # a new file: the loaded model still maps the old one (as after an interrupted copy)
    stored.write_bytes(cut)
    rebuilt = target_kernels.kernel_target(_cached_target(tiny_pair, tmp_path), "w8a8")
    assert len(builds) == 2
    ids = torch.tensor([[5, 9, 17, 33]])
    with torch.inference_mode():
        assert torch.equal(again(input_ids=ids).logits, first(input_ids=ids).logits)
        assert torch.equal(rebuilt(input_ids=ids).logits, first(input_ids=ids).logits)


# --- a machine that cannot run it -----------------------------------------------------------------


def test_no_avx2_or_no_compiler_or_a_gpu_is_one_line(monkeypatch):
    from specdec.models import machine

    assert "runs on a CPU only" in w8a8_build.unavailable_reason(torch.device("cuda"))
    monkeypatch.setattr(w8a8_build, "compiler", lambda: None)
    assert w8a8_build.unavailable_reason() == ("the w8a8 target kernel is not available here: it is built once with a C++ "
                                               "compiler, and none was found (install g++)")
    monkeypatch.setattr(machine, "cpu_flags", lambda: ("sse2", "avx"))
    assert "it needs an x86 CPU with AVX2" in w8a8_build.unavailable_reason()


def test_unavailable_kernel_is_not_offered_and_asking_for_it_is_one_line(tiny_pair, monkeypatch, capsys):
    from specdec.__main__ import main

    line = "the w8a8 target kernel is not available here: test"
    monkeypatch.setattr(w8a8_build, "unavailable_reason", lambda device=None: line)
    assert "w8a8" not in device_offer.target_kernels(CPU).names and "q4k" in device_offer.target_kernels(CPU).names
    assert device_offer.target_kernels(CPU).not_offered["w8a8"] == line  # the reason, as the dropdown says it
    assert not [v for v in device_offer.draft_variants(CPU).names if v.startswith("w8a8")] and "int4-v32k" in device_offer.draft_variants(CPU).names
    fresh = replace(tiny_pair, built=Built())
    for ask in (lambda: target_kernels.kernel_target(fresh, "w8a8"), lambda: variants.draft_model(fresh, "w8a8-v16k")):
        with pytest.raises(ValueError) as err:
            ask()
        assert str(err.value) == line
    argv = ["generate", "--pair", "tiny-random", "--dtype", "fp32", "--prompt", "x", "--max-new-tokens", "2", "--target-kernel", "w8a8"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"error: {line}"


def test_every_header_the_sources_include_is_part_of_the_build_key():
    """A header left out of HEADERS would change the kernel without rebuilding it (or retiming its cost tables)."""
    import re

    included = {name for path in (*w8a8_build.SOURCES, *w8a8_build.HEADERS)
                for name in re.findall(r'#include "([^"]+)"', path.read_text())}
    assert included == {path.name for path in w8a8_build.HEADERS}


def test_a_failed_build_is_reported_not_retried(tmp_path, monkeypatch):
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(w8a8_build, "SOURCES", (broken,))
    assert w8a8_build.unavailable_reason() is None  # not built yet: offered, built on first use
    with pytest.raises(ValueError, match="its build failed"):
        w8a8_build.build(progress=False)
    reason = w8a8_build.unavailable_reason()
    assert reason.startswith("the w8a8 target kernel is not available here: its build failed (log: ")
    assert "this is not C++" in (w8a8_build.failed_folder(w8a8_build.compiler()) / "build.log").read_text()
    assert not list((tmp_path / "cache" / "kernels").glob(".w8a8-*"))  # no half-built folder left behind


def test_generation_config_accepts_the_names():
    assert GenerationConfig(target_kernel="w8a8", draft_variant="w8a8-v32k").validate().target_kernel == "w8a8"


def test_prepare_builds_the_kernel_or_says_why_not(monkeypatch, capsys):
    from specdec.__main__ import prepare_w8a8

    prepare_w8a8()  # built already (this module needs it): a no-op that names the library
    assert capsys.readouterr().out.strip() == f"w8a8 kernel ready: {w8a8_build.load()}"
    line = "the w8a8 target kernel is not available here: test"
    monkeypatch.setattr(w8a8_build, "unavailable_reason", lambda device=None: line)
    prepare_w8a8()
    assert capsys.readouterr().out.strip() == line


def test_a_compiled_call_traces_the_op_by_its_shape_and_gives_its_bits():
    """torch.compile traces the op on tensors without data, by the output shape registered with it
    (w8a8_build.load), so a compiled runner can capture a w8a8 pass: fullgraph raises on a break."""
    lin, _, _ = layer(70, 37, bias=True)
    compiled = torch.compile(lambda x: lin(x), fullgraph=True, dynamic=False)
    for m, dtype in ((1, torch.float32), (6, torch.bfloat16)):
        x = activations(m, 37, dtype)
        y = compiled(x)
        assert y.shape == (m, 70) and y.dtype == dtype and torch.equal(y, lin(x))


def test_the_compiled_runner_captures_w8a8_passes_and_keeps_the_text(tiny_pair, caplog):
    from tests.support.runs import run_checked, tokens
    from specdec.engines.ours import OurSource

    config = GenerationConfig(k=2, max_new_tokens=12, target_kernel="w8a8", draft_variant="w8a8")
    plain = run_checked(tiny_pair, "def add(a, b):", replace(config, drafter="none", runner="static"))
    run = OurSource(tiny_pair, replace(config, runner="compiled")).run("def add(a, b):")
    compiled = list(run)
    # The draft computes in bf16 (as every quantized draft does); on tiny-random's flat distributions
    # its guesses move with the rounding of its glue, which compiling changes, so the steps may differ
    # from a static run's. The text may not: it is the w8a8 target's (fp32 glue here).
    assert tokens(compiled) == tokens(plain)
    assert "could not capture" not in caplog.text
    assert run.runner.target.captured and run.proposers[-1].lm.captured  # the target's passes and the draft model's
