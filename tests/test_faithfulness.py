"""Faithfulness of a target kernel to the dense target: where its greedy text departs, and its top-1
agreement under teacher forcing; and the bench's columns built from them."""

import math

import pytest
import torch

from specdec.core.runners.eager_model import CachedModel
from specdec.measure.faithfulness import (faithfulness, first_departure, forced_pass, forced_predictions, forced_top2, kl, kl_top,
                                         listed, top1_agreement, untied_agreement)

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):"


def test_first_departure():
    assert first_departure([1, 2, 3], [1, 2, 3]) is None
    assert first_departure([1, 9, 3], [1, 2, 3]) == 1
    assert first_departure([1, 2], [1, 2, 3]) == 2  # a run that ended early departs where it ended
    assert first_departure([5], [1]) == 0


def test_top1_agreement():
    assert top1_agreement([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    assert top1_agreement([], []) is None
    with pytest.raises(ValueError, match="2 predictions for a reference of 3"):
        top1_agreement([1, 2], [1, 2, 3])


def test_agreement_where_the_reference_is_not_tied():
    # positions 1 and 3 are tied in the reference: the flip at 1 does not count, the one at 2 does
    assert untied_agreement([1, 9, 0, 4], [1, 2, 3, 4], [False, True, False, True]) == 0.5
    assert untied_agreement([1, 9], [1, 2], [True, True]) is None
    f = faithfulness([1, 9, 3], [1, 2, 3], [1, 9, 3], tied=[False, True, False])
    assert f.top1_agreement == pytest.approx(2 / 3) and f.top1_agreement_untied == 1.0 and f.tied == 1
    assert faithfulness([1], [1], [1]).top1_agreement_untied is None  # ties not known: not judged
    with pytest.raises(ValueError):
        untied_agreement([1, 2], [1, 2], [False])


def test_kl_is_the_divergence_of_the_whole_distribution_averaged_over_positions():
    g = torch.Generator().manual_seed(0)
    p, q = (torch.randn(3, 50, generator=g).log_softmax(-1) for _ in range(2))  # (R, V) log-probabilities
    by_hand = sum(float((p[t].exp() * (p[t] - q[t])).sum()) for t in range(3)) / 3
    assert kl(p, q) == pytest.approx(by_hand, rel=1e-6) and kl(p, p) == 0.0 and kl(p, q) > 0
    assert kl(torch.empty(0, 50), torch.empty(0, 50)) is None
    with pytest.raises(ValueError, match="shapes"):
        kl(p, q[:2])


def test_kl_top_buckets_the_references_most_likely_tokens_and_is_a_lower_bound():
    """Four tokens: the reference's top two get a bucket each, the other two share the rest."""
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    q = torch.tensor([[0.4, 0.4, 0.1, 0.1]]).log()
    by_hand = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.4) + 0.2 * math.log(0.2 / 0.2)
    assert kl_top(p, listed(q), n=2) == pytest.approx(by_hand, rel=1e-6)
    # a token the other side does not list falls in the rest: here the reference's second
    only_first = [{0: math.log(0.4)}]
    assert kl_top(p, only_first, n=2) == pytest.approx(0.5 * math.log(0.5 / 0.4) + 0.5 * math.log(0.5 / 0.6), rel=1e-6)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):  # merging outcomes never raises a KL divergence; with every token bucketed it is the whole
        a, b = (torch.randn(4, 300, generator=g).mul(3).log_softmax(-1) for _ in range(2))
        assert kl_top(a, listed(b)) <= kl(a, b) + 1e-9
        assert kl_top(a, listed(b, 300), n=300) == pytest.approx(kl(a, b), rel=1e-4)
    with pytest.raises(ValueError, match="1 listed positions for 4"):
        kl_top(a, listed(b)[:1])


def test_forced_top2_gives_the_gap_between_the_best_two_logits(tiny_pair):
    prompt_ids = tiny_pair.encode_prompt(PROMPT, chat=False, max_new_tokens=4)
    reference = [5, 6, 7, 8]
    predicted, margins = forced_top2(CachedModel(tiny_pair.target, tiny_pair.vocab_size), prompt_ids, reference)
    assert predicted == forced_predictions(CachedModel(tiny_pair.target, tiny_pair.vocab_size), prompt_ids, reference)
    lm = CachedModel(tiny_pair.target, tiny_pair.vocab_size)
    top = lm.forward(torch.tensor(prompt_ids + reference[:2]), last_only=True).float().reshape(-1).topk(2).values
    assert margins[2] == pytest.approx(float(top[0] - top[1]), abs=1e-5) and all(m >= 0 for m in margins)


def test_forced_predictions_are_the_greedy_choices_along_a_text(tiny_pair):
    """Along the model's own greedy output, teacher forcing predicts that output (fp32: no ties)."""
    from specdec.core.config import GenerationConfig
    from specdec.engines.ours import OurSource

    config = GenerationConfig(max_new_tokens=10, drafter="none")
    ids = [t for e in OurSource(tiny_pair, config).run(PROMPT, chat=False) for t in e.emitted]
    prompt_ids = tiny_pair.encode_prompt(PROMPT, chat=False, max_new_tokens=10)
    model = CachedModel(tiny_pair.target, tiny_pair.vocab_size)
    predicted = forced_predictions(model, prompt_ids, ids)
    assert predicted == ids
    f = faithfulness(ids, ids, predicted)
    assert f.first_departure is None and f.top1_agreement == 1.0 and f.compared == 10
    # Along another text, the predictions are the model's choices after each of its prefixes.
    other = [(t + 1) % tiny_pair.vocab_size for t in ids]
    predicted = forced_predictions(CachedModel(tiny_pair.target, tiny_pair.vocab_size), prompt_ids, other)
    for i in (0, 4, 9):
        lm = CachedModel(tiny_pair.target, tiny_pair.vocab_size)
        logits = lm.forward(torch.tensor(prompt_ids + other[:i]), last_only=True)
        assert predicted[i] == int(logits.argmax())


def test_bench_judges_every_plain_run_against_dense(tiny_pair):
    from specdec.bench.report import table
    from specdec.bench.runner import bench

    prompts = [{"id": "code", "prompt": PROMPT, "chat": False}]
    report = bench(tiny_pair, prompts, modes=["plain", "spec"], kernels=["q4k", "dense"], k=3, max_new_tokens=10,
                   warmup_tokens=2, log=lambda line: None)
    assert report["settings"]["target_kernels"] == ["dense", "q4k"]  # the reference runs first
    rows = {(r["mode"], r["target_kernel"]): r for r in report["results"]}
    dense, q4k = rows["plain", "dense"], rows["plain", "q4k"]
    assert dense["departs_dense_at"] is None and dense["top1_agree_dense"] == 1.0  # fp32: the one pass agrees with decoding
    assert 0 <= q4k["top1_agree_dense"] <= 1
    assert dense["top1_agree_dense_untied"] == 1.0 and dense["dense_tied"] == 0  # fp32 on tiny-random: no ties at 1e-3
    assert q4k["dense_tied"] == 0 and q4k["top1_agree_dense_untied"] == q4k["top1_agree_dense"]
    assert rows["spec", "q4k"]["top1_agree_dense"] is None  # speculative runs are judged against their own plain run
    # The figures are what the measure says of the two outputs: recompute them here.
    dense_ids = [t for e in bench_events(tiny_pair, "dense") for t in e.emitted]
    q4k_ids = [t for e in bench_events(tiny_pair, "q4k") for t in e.emitted]
    assert q4k["departs_dense_at"] == first_departure(q4k_ids, dense_ids)
    by_kernel = report["summary"]["by_kernel"]
    assert by_kernel["q4k"]["faithfulness"]["plain"]["top1_agree_dense"] == q4k["top1_agree_dense"]
    assert "faithful to dense plain: plain [q4k] top-1" in table(report)
    # KL from dense along dense's output: 0 for dense itself; q4k's, from the two forced passes, and its top-20 bound below it
    assert dense["kl_dense"] == 0.0 and dense["kl_dense_top"] == 0.0
    prompt_ids = tiny_pair.encode_prompt(PROMPT, chat=False, max_new_tokens=10)
    theirs = forced_pass(q4k_model(tiny_pair), prompt_ids, dense_ids).logprobs
    ours = forced_pass(CachedModel(tiny_pair.target, tiny_pair.vocab_size), prompt_ids, dense_ids).logprobs
    assert q4k["kl_dense"] == pytest.approx(kl(ours, theirs), rel=1e-6) and q4k["kl_dense"] > 0
    assert 0 <= q4k["kl_dense_top"] <= q4k["kl_dense"]
    assert by_kernel["q4k"]["faithfulness"]["plain"]["kl_dense"] == q4k["kl_dense"]
    assert f"KL from dense {q4k['kl_dense']:.5f} nats (top-20 bound" in table(report)


def q4k_model(pair):
    from specdec.kernels.target_kernels import kernel_target

    return CachedModel(kernel_target(pair, "q4k"), pair.vocab_size)


def bench_events(pair, kernel):
    from specdec.core.config import GenerationConfig
    from specdec.engines.ours import OurSource

    return list(OurSource(pair, GenerationConfig(max_new_tokens=10, drafter="none", target_kernel=kernel)).run(PROMPT, chat=False))


def test_the_page_says_how_faithful_a_kernel_was_measured_to_be(monkeypatch):
    from specdec.kernels import faithfulness_record as record

    monkeypatch.setattr(record, "MEASURED", {("pair", "w8a8"): record.Measured(0.984, 2, 6, 64, 1.0, 6, kl=0.00071, kl_top=0.0007),
                                             ("pair", "llamacpp_plain"): record.Measured(0.97, 3, 6, 64, kl_top=0.00052),
                                             ("pair", "int8"): record.Measured(0.99, 0, 6, 64)})
    assert record.faithfulness_note("pair", "dense") == "the dense target itself"
    assert record.faithfulness_note("pair", "w8a8") == ("top-1 agreement with dense 0.984 (1.000 where dense itself is not "
                                                        "tied), its greedy text left dense's on 2 of 6 prompts within 64 tokens")
    assert record.faithfulness_note("other", "w8a8") == "faithfulness to the dense target not measured for this pair"
    line = record.faithfulness_line("pair", ("dense", "w8a8", "q4k", "llamacpp_plain"))
    assert "w8a8 0.984 (1.000), llamacpp_plain 0.970 (docs" in line and "q4k" not in line and "not tied" in line
    # KL: the whole figure where it was measured, a server's lower bound said to be one, nothing for a kernel without either
    assert "in nats" in line and "w8a8 0.00071, llamacpp_plain at least 0.00052;" in line and "a lower bound" in line
    both = record.faithfulness_line("pair", ("int8", "w8a8"))
    assert "int8 0.990, w8a8 0.984" in both and "next-token distribution moved, not only its best token): w8a8 0.00071;" in both
    assert "KL" not in record.faithfulness_line("pair", ("int8",))
    assert record.faithfulness_line("other", ("w8a8",)) == ""
