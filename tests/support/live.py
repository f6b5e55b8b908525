"""The page's live runs as the tests drive them: every setting by its component, and a progress callback that shows nothing."""

from __future__ import annotations

from app.client import status_details, status_line  # noqa: F401 (the tests read the status line through these)
from app.components import StopFlag


def settings(page, **overrides) -> dict:
    values = {page.prompt: "def add(a, b):", page.pair: "tiny-random", page.drafter: "model", page.k: 4,
              page.adaptive: False, page.temperature: 0, page.top_p: 1, page.top_k: 0, page.max_new: 48,
              page.seed: 0, page.compare: True, page.show_rejected: True, page.draft_variant: "dense",
              page.plain_int4: False, page.cost_k: False, page.stop: StopFlag(),
              page.target_kernel: "dense", page.runner: "eager", page.engine: "specdec", page.spec_url: "", page.plain_url: ""}
    values.update({getattr(page, k): v for k, v in overrides.items()})
    return values


def no_progress(*args, **kwargs):
    pass
