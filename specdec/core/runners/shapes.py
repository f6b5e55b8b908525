"""The fixed shapes of the static and compiled runners: how many tokens one pass feeds.

A pass over n tokens runs in the smallest bucket that holds n; the padded rows land past the
model's position and are overwritten by later passes, never read (the mask stops at the position).
The buckets include the cost table's sizes (specdec.measure.cost_table.SIZES), so a cost table of
this runner times exactly the passes a run makes, and reach 33: a check of K + 1 tokens with K up
to MAX_K = 32.
"""

from __future__ import annotations

from specdec.core.config import MAX_K

BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, MAX_K + 1)
LARGEST = BUCKETS[-1]
DRAFT_SHAPES = ((1, True), (2, True))  # (tokens, last row only): a draft pass, the catch-up after a full accept


def bucket(n: int) -> int:
    """The smallest bucket that holds n tokens (1 <= n <= LARGEST)."""
    for size in BUCKETS:
        if n <= size:
            return size
    raise ValueError(f"a fixed-shape pass holds at most {LARGEST} tokens, got {n}")


def target_shapes(config) -> tuple[tuple[int, bool], ...]:
    """The target's passes a run with these settings can make: a check of K + 1 tokens for every K
    up to the longest the K policy may ask for (shorter ones too: the last step of a run drafts
    only what max_new_tokens leaves room for), all rows kept."""
    if config.drafter == "none":
        longest = 0
    elif config.policy == "fixed":
        longest = config.k
    else:
        longest = max(config.k, config.k_max)
    top = bucket(longest + 1)
    return tuple((size, False) for size in BUCKETS if size <= top)
