"""What each device is offered (specdec/kernels/device_offer.py): on a GPU only what runs on dense
weights, with a reason for everything else; a fake CUDA device answers as a real one would."""

import pytest
import torch

from specdec.core.variant_names import KERNELS, VARIANTS
from specdec.kernels import device_offer

CUDA, CPU = torch.device("cuda"), torch.device("cpu")  # a device description: no GPU is needed to build one


def test_a_cpu_is_offered_everything(monkeypatch):
    monkeypatch.setattr(device_offer.w8a8_build, "unavailable_reason", lambda device=None: None)  # a CPU the w8a8 kernel runs on
    assert device_offer.draft_variants(CPU).names == VARIANTS and not device_offer.draft_variants(CPU).not_offered
    assert device_offer.target_kernels(CPU).names == KERNELS and device_offer.lossy_lane(CPU) is None
    assert device_offer.draft_variants(CPU).explain("cpu") == ""


def test_a_gpu_is_offered_the_dense_weights_and_told_why_not_the_rest():
    variants, kernels = device_offer.draft_variants(CUDA), device_offer.target_kernels(CUDA)
    assert variants.names == ("dense", "dense-v16k", "dense-v32k") and kernels.names == ("dense",)
    assert set(variants.names) | set(variants.not_offered) == set(VARIANTS)  # every name offered or explained
    assert set(kernels.names) | set(kernels.not_offered) == set(KERNELS)
    assert "dequantize" in variants.not_offered["int4-v32k"] and "int4" in variants.not_offered["int4-v32k"]
    assert "CPU int8 kernel" in kernels.not_offered["int8"] and "unpack" in kernels.not_offered["q4k"]
    assert "int4" in device_offer.lossy_lane(CUDA)
    assert "runs on a CPU only" in kernels.not_offered["w8a8"] and "runs on a CPU only" in variants.not_offered["w8a8-v32k"]
    line = variants.explain("cuda")
    assert line.startswith("Not offered on cuda: int8, int8-v16k, int8-v32k (int8 weights run on torch's CPU int8 kernel")
    assert "; int4, int4-v16k, int4-v32k (int4 weights" in line and line.count("Not offered") == 1


def test_a_request_for_what_is_not_offered_is_named():
    assert device_offer.target_kernels(CUDA).check("target_kernel", "dense", "cuda") == "dense"
    with pytest.raises(ValueError, match=r"target_kernel 'q4k' is not offered on cuda: Q4_K blocks run on torch's CPU int4"):
        device_offer.target_kernels(CUDA).check("target_kernel", "q4k", "cuda")
