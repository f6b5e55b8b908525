"""The runner a run gets when none is named: the one measured fastest on this kind of machine.

Measured per kind of machine (specdec.models.machine.machine_kind) with scripts/runner_passes.py and
`python -m specdec bench --runner eager,static` (docs/benchmarks.md, "Runners"); a kind not listed
(an AVX2-only CPU, a GPU: not measured yet) keeps eager, transformers as it is.
"""

from __future__ import annotations

from specdec.models import machine

MEASURED_DEFAULTS: dict[str, str] = {}


def default_runner(device) -> str:
    return MEASURED_DEFAULTS.get(machine.machine_kind(device), "eager")
