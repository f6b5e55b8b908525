"""Product layers joined into one (specdec/kernels/joined.py, specdec/core/runners/joined_products.py):
the joined layer's output is its parts' outputs side by side, bit for bit, on every path of this CPU;
the parts hold views into its weights (held once, and still runnable alone); what cannot be joined is
not. The lean pass's bit-equality with transformers' path on joined layers is tests/test_lean_pass.py's."""

import pytest
import torch

from specdec.core.runners import joined_products
from specdec.kernels import q4k, w8a8_build
from specdec.kernels.quant import module_bytes, quantize
from specdec.measure.passcost import products

pytestmark = pytest.mark.skipif(not w8a8_build.available()[0], reason=w8a8_build.unavailable_reason() or "")


def layers(kind: str, sizes, cols: int = 300, bias: bool = True, path: int = 0, seed: int = 0) -> list[torch.nn.Module]:
    from specdec.kernels.w4a8 import W4A8Linear
    from specdec.kernels.w8a8 import W8A8Linear

    g = torch.Generator().manual_seed(seed)
    made = []
    for n in sizes:
        w, b = torch.randn(n, cols, generator=g) * 0.05, (torch.randn(n, generator=g) if bias else None)
        if kind == "w4a8":
            made.append(W4A8Linear(q4k.quantize(w), cols, b, torch.device("cpu"), path=path))
        else:
            made.append(W8A8Linear(quantize(w, 8), b, torch.device("cpu"), path=path))
    return made


def paths() -> list[int]:
    """The paths this CPU runs (auto among them)."""
    bits = torch.ops.specdec.w4a8_paths()
    return [0] + [path for path, bit in ((1, 1), (2, 2), (3, 4)) if bits & bit]


@pytest.mark.parametrize("kind", ["w4a8", "w8a8"])
@pytest.mark.parametrize("rows", [1, 4, 20])  # 20: AMX where the CPU has it
def test_a_joined_layer_gives_its_parts_outputs_bit_for_bit(kind, rows):
    w8a8_build.load()
    for path in paths():
        parts = layers(kind, (96, 32, 40), path=path)
        x = torch.randn(1, rows, 300, generator=torch.Generator().manual_seed(rows)).bfloat16()
        apart = torch.cat([p(x) for p in parts], dim=-1)
        joined = type(parts[0]).joined(parts)
        assert joined.out_features == 168
        assert torch.equal(joined(x), apart), path
        assert torch.equal(torch.cat([p(x) for p in parts], dim=-1), apart), path  # the parts, now views, alone


@pytest.mark.parametrize("kind", ["w4a8", "w8a8"])
def test_the_parts_hold_views_of_the_joined_weights(kind):
    parts = layers(kind, (64, 32))
    before = sum(module_bytes(p) for p in parts)
    joined = type(parts[0]).joined(parts)
    holder = torch.nn.ModuleList([*parts, joined])
    assert module_bytes(holder) == module_bytes(joined) <= before  # once (the old buffers are dropped)
    for part in parts:
        assert part.packed.untyped_storage().data_ptr() == joined.packed.untyped_storage().data_ptr()
        assert part.packed.is_contiguous()


def test_what_cannot_be_joined_is_not():
    from specdec.kernels.w8a8 import W8A8Linear

    w4 = layers("w4a8", (40, 32))
    assert type(w4[0]).joined(w4) is None  # the first part does not fill whole tiles of 32 channels
    assert W8A8Linear.joined([*layers("w8a8", (32,)), *layers("w4a8", (32,))]) is None  # two kernels
    assert W8A8Linear.joined([*layers("w8a8", (32,)), *layers("w8a8", (32,), bias=False)]) is None  # one bias
    assert W8A8Linear.joined([*layers("w8a8", (32,)), *layers("w8a8", (32,), cols=256)]) is None  # other inputs
    assert W8A8Linear.joined(layers("w8a8", (32,))) is None  # one part


@pytest.mark.parametrize("kernel", ["w4a8", "w8a8", "int8"])
def test_the_lean_pass_joins_what_its_kernel_offers(tiny_pair, kernel):
    """w8a8 and w4a8 layers are joined (and are products a measurement finds); int8's are not."""
    from specdec.kernels.target_kernels import kernel_target

    model = kernel_target(tiny_pair, kernel)
    plan = joined_products.plan(model.get_decoder())
    assert plan is joined_products.plan(model.get_decoder())  # made once
    joined = [p.qkv for p in plan] + [p.gate_up for p in plan]
    if kernel == "int8":
        assert joined == [None] * len(joined)
    else:
        assert all(p.qkv is not None and p.with_value and p.gate_up is not None for p in plan)
        assert set(joined) <= set(products(model))


def test_a_lean_model_is_joined_before_its_first_pass(tiny_pair):
    """A runner's model joins its products when it is made, so that what wraps the model's products
    before a pass (passcost.no_products, hooks) finds the joined ones too."""
    import copy

    from specdec.core.runners.eager_model import CachedModel
    from specdec.kernels.target_kernels import kernel_target

    model = copy.deepcopy(kernel_target(tiny_pair, "w4a8"))
    model.get_decoder().__dict__.pop(joined_products.PLAN, None)
    lm = CachedModel(model, tiny_pair.vocab_size)
    assert lm.lean and joined_products.PLAN in model.get_decoder().__dict__
    assert model.get_decoder().layers[0].self_attn.specdec_qkv in products(model)
