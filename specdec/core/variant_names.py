"""The names of draft variants and target kernels, and their grammar: light enough for settings.

GenerationConfig.validate checks names here without loading torch; what each name builds lives in
specdec/kernels/variants.py (draft variants) and specdec/kernels/target_kernels.py (target kernels).
A draft variant is named `<weights>[-v16k|-v32k]`: the weights as loaded (`dense`, in the pair's
dtype: bf16, or fp32 on a CPU without native bf16), weight-only quantized (`int8`, `int4`), or int8
weights with int8 activations (`w8a8`: specdec/kernels/w8a8.py), optionally with a head that scores
only the most frequent tokens. The target kernel `dense` is the target as loaded, likewise.

`dense` was called `bf16` before, though it runs fp32 where the pair does; `canonical` reads the old
name (`bf16`, `bf16-v32k`) as the new one wherever a name comes from outside: the command line, a
GenerationConfig, an old run file.

`w8a8` and `w4a8` (the GGUF's 4-bit Q4_K weights with int8 activations: specdec/kernels/w4a8.py) run on
kernels of this project's own, built once where the CPU and a C++ compiler allow
(specdec/kernels/w8a8_build.py): every name here is valid, but only those the machine can run are
offered (specdec/kernels/w8a8_build.py `available`, read by the lists the CLI and the page show).
"""

from __future__ import annotations

DENSE = "dense"  # the weights as loaded, in the pair's dtype: a draft variant's weights and a target kernel
WEIGHTS = {DENSE: None, "int8": 8, "int4": 4, "w8a8": 8, "w4a8": 4}  # name -> bits of the decoder layers (None: as loaded)
HEADS = {"": None, "-v16k": 16384, "-v32k": 32768}  # suffix -> tokens the draft head scores (None: all)
VARIANTS = tuple(w + h for w in WEIGHTS for h in HEADS)
# how the target runs: as loaded, weight-only int8, the GGUF's Q4_K grid, int8 weights and activations,
# the GGUF's Q4_K grid with int8 activations
KERNELS = (DENSE, "int8", "q4k", "w8a8", "w4a8")
W8A8 = "w8a8"  # the weights / kernel name that needs the W8A8 kernel
W4A8 = "w4a8"  # the kernel name that needs the W4A8 kernel (in the same library as W8A8)
ALIASES = {"bf16": DENSE}  # old weights / kernel name -> today's


def canonical(name):
    """Today's name of a draft variant or target kernel: `bf16` -> `dense`, `bf16-v32k` ->
    `dense-v32k`; any other name (or a value that is no name) as it is, for the checks below."""
    if not isinstance(name, str):
        return name
    weights, dash, head = name.partition("-")
    return ALIASES.get(weights, weights) + dash + head


def needs_w8a8(name: str) -> bool:
    """Whether a draft variant or target kernel name runs on the W8A8 kernel (`w8a8`, `w8a8-v32k`)."""
    return isinstance(name, str) and name.partition("-")[0] == W8A8


def needs_w4a8(name: str) -> bool:
    """Whether a draft variant or target kernel name runs on the W4A8 kernel (`w4a8`)."""
    return isinstance(name, str) and name.partition("-")[0] == W4A8


def native_kernel(name: str) -> str | None:
    """The kernel of this project's library a name runs on ("w8a8" or "w4a8"), None for torch's own."""
    return W8A8 if needs_w8a8(name) else W4A8 if needs_w4a8(name) else None


def variant_parts(name) -> tuple[int | None, int | None]:
    """`int4-v32k` -> (4, 32768): (decoder-layer bits, tokens the head scores), None meaning as
    loaded / all (an old name read as today's); ValueError naming draft_variant and the allowed names otherwise."""
    name = canonical(name)
    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(f"draft_variant must be one of {', '.join(VARIANTS)}, got {name!r}")
    weights, _, head = name.partition("-")
    return WEIGHTS[weights], HEADS["-" + head if head else ""]


def parse_kernel(name) -> str:
    """Today's name (`bf16` -> `dense`), or ValueError naming target_kernel and the allowed names."""
    name = canonical(name)
    if not isinstance(name, str) or name not in KERNELS:
        raise ValueError(f"target_kernel must be one of {', '.join(KERNELS)}, got {name!r}")
    return name
