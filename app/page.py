"""The Page: every component of the page by name, and the per-session stop flag.

Event handlers take their inputs as a dict and return a dict of updates keyed by these
components, so a feature adds a control or an output without reordering anyone's tuples, and a
frame sends only what changed. app/layout.py and its sections fill a Page in.
"""

from __future__ import annotations

import threading
from pathlib import Path

from . import theory

ASSETS = Path(__file__).resolve().parent.parent / "assets"
PENDING = ""  # a token pane with no spans yet


class StopFlag(threading.Event):
    """Per-session stop signal. gr.State deep-copies its initial value for each session; a lock
    cannot be copied, so a copy is simply a fresh flag."""

    def __deepcopy__(self, memo):
        return StopFlag()


class Page:
    """Every component a handler reads or writes, by name. Filled in by build_layout()."""

    def settings(self) -> set:
        """The controls a run reads (passed to handlers as one dict)."""
        return {self.prompt, self.pair, self.drafter, self.k, self.adaptive, self.temperature, self.top_p,
                self.top_k, self.max_new, self.seed, self.compare, self.show_rejected, self.draft_variant, self.plain_int4, self.cost_k,
                self.target_kernel, self.runner, self.engine, self.spec_url, self.plain_url}

    def run_outputs(self) -> list:
        """Everything a frame of a run may update."""
        return [self.status, self.spec_html, self.plain_html, self.stats, self.predictions, *self.plots,
                self.lossy_html, self.lossy_note, *theory.outputs(self), *self.run_states()]

    def run_states(self) -> list:
        """The per-session state a frame of a run writes (a replay frame leaves it alone)."""
        return [self.spec_events, self.plain_events, self.run_view]
