"""Each drafter's recorded acceptance, per kind of text: where the cost K policy's estimate starts
(specdec.core.k_policy.AcceptanceEstimate) and what the measured defaults predict from
(specdec.measure.choose).

Shipped as data (assets/recorded_acceptance.json), each figure with its source: a run's estimate
that starts at a made-up 0.8 pays for its first steps with drafts that the text never accepts
(the held-out chat prompts of the embedded pair accept about a third of the draft model's tokens).
A file that is missing or cannot be read gives FALLBACK, said in `source`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from specdec.core.theory import alpha_from_share

PATH = Path(__file__).resolve().parents[2] / "assets" / "recorded_acceptance.json"
FORMAT = "specdec-acceptance"
DRAFTERS = ("model", "head", "lookup")
FALLBACK = 0.5  # alpha where nothing is recorded: neither the best case nor the worst


@dataclass(frozen=True)
class Recorded:
    alpha: float  # per-token acceptance
    kind: str  # the kind of text it was recorded on ("" where nothing was)
    source: str  # where the figure comes from


@lru_cache(maxsize=4)
def _table(path: Path = PATH) -> tuple[str, dict, str]:
    """(default kind, drafter -> kind -> entry, the pair it was recorded on), or ("", {}, "") when the
    file cannot be trusted."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT or not isinstance(data.get("drafters"), dict):
            return "", {}, ""
        return str(data.get("default_kind", "")), data["drafters"], str(data.get("pair", ""))
    except (OSError, ValueError, AttributeError):
        return "", {}, ""


def recorded_pair(path: Path = PATH) -> str:
    """The pair the acceptance was recorded on ("" where the file cannot be read): another pair's
    drafts are accepted at rates nobody recorded."""
    return _table(path)[2]


def _alpha(entry: dict) -> float:
    if "alpha" in entry:
        return float(entry["alpha"])
    return alpha_from_share(float(entry["accepted_share"]), int(entry["k"]))


def recorded(drafter: str, kind: str | None = None, path: Path = PATH) -> Recorded:
    """The drafter's recorded acceptance on `kind` of text (None: the file's default kind), else on
    the default kind, else FALLBACK."""
    default_kind, drafters, _ = _table(path)
    kinds = drafters.get(drafter, {}) if isinstance(drafters.get(drafter), dict) else {}
    for name in dict.fromkeys(k for k in (kind, default_kind) if k):
        entry = kinds.get(name)
        try:
            return Recorded(min(max(_alpha(entry), 0.0), 1.0), name, str(entry.get("source", "")))
        except (TypeError, ValueError, KeyError, AttributeError):
            continue
    return Recorded(FALLBACK, "", f"nothing recorded for the {drafter} drafter: {FALLBACK}")


def priors(kind: str | None = None, path: Path = PATH) -> dict[str, float]:
    """drafter -> recorded alpha on `kind` of text."""
    return {drafter: recorded(drafter, kind, path).alpha for drafter in DRAFTERS}


def highest(drafter: str, path: Path = PATH) -> float:
    """The drafter's highest recorded acceptance on any kind of text (FALLBACK where none is): how
    easy the text may turn for it, which the cost policy's probes ask about."""
    _, drafters, _ = _table(path)
    kinds = drafters.get(drafter, {}) if isinstance(drafters.get(drafter), dict) else {}
    alphas = [recorded(drafter, kind, path).alpha for kind in kinds]
    return max(alphas, default=FALLBACK)
