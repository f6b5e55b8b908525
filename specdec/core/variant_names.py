"""The names of draft variants and target kernels, and their grammar: light enough for settings.

GenerationConfig.validate checks names here without loading torch; what each name builds lives in
specdec/kernels/variants.py (draft variants) and specdec/kernels/target_kernels.py (target kernels).
A draft variant is named `<weights>[-v16k|-v32k]`: the weights as loaded (`bf16`), weight-only
quantized (`int8`, `int4`), or int8 weights with int8 activations (`w8a8`: specdec/kernels/w8a8.py),
optionally with a head that scores only the most frequent tokens.

`w8a8` runs on a kernel of this project's own, built once where the CPU and a C++ compiler allow
(specdec/kernels/w8a8_build.py): every name here is valid, but only those the machine can run are
offered (specdec/kernels/w8a8_build.py `available`, read by the lists the CLI and the page show).
"""

from __future__ import annotations

WEIGHTS = {"bf16": None, "int8": 8, "int4": 4, "w8a8": 8}  # name -> bits of the decoder layers (None: as loaded)
HEADS = {"": None, "-v16k": 16384, "-v32k": 32768}  # suffix -> tokens the draft head scores (None: all)
VARIANTS = tuple(w + h for w in WEIGHTS for h in HEADS)
# how the target runs: as loaded, weight-only int8, the GGUF's Q4_K grid, int8 weights and activations
KERNELS = ("bf16", "int8", "q4k", "w8a8")
W8A8 = "w8a8"  # the weights / kernel name that needs the W8A8 kernel


def needs_w8a8(name: str) -> bool:
    """Whether a draft variant or target kernel name runs on the W8A8 kernel (`w8a8`, `w8a8-v32k`)."""
    return isinstance(name, str) and name.partition("-")[0] == W8A8


def variant_parts(name) -> tuple[int | None, int | None]:
    """`int4-v32k` -> (4, 32768): (decoder-layer bits, tokens the head scores), None meaning as
    loaded / all; ValueError naming draft_variant and the allowed names otherwise."""
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(f"draft_variant must be one of {', '.join(VARIANTS)}, got {name!r}")
    weights, _, head = name.partition("-")
    return WEIGHTS[weights], HEADS["-" + head if head else ""]


def parse_kernel(name) -> str:
    """The name, or ValueError naming target_kernel and the allowed names."""
    if not isinstance(name, str) or name not in KERNELS:
        raise ValueError(f"target_kernel must be one of {', '.join(KERNELS)}, got {name!r}")
    return name
