"""The runner a run gets when none is named: the one measured fastest on this kind of machine.

Measured per kind of machine (specdec.models.machine.machine_kind) with `python -m specdec passes
--runner eager,static,compiled` and `python -m specdec bench --runner eager,static` (docs/benchmarks.md, "Runners"); a kind not listed
(an AVX2-only CPU, a GPU: not measured yet) keeps eager, transformers as it is.
"""

from __future__ import annotations

from specdec.models import machine

# AVX-512 BF16: static 0.97x eager per pass, level over whole runs (plain 0.98x and 1.01x in two
# bench runs): no measured gain to switch for. Compiled on the w8a8 kernel: `best` 1.17x eager, but
# after minutes of compiling per process (24,000 to 33,000 tokens to pay back): eager still.
MEASURED_DEFAULTS: dict[str, str] = {"cpu-avx512_bf16": "eager"}


def default_runner(device) -> str:
    return MEASURED_DEFAULTS.get(machine.machine_kind(device), "eager")
