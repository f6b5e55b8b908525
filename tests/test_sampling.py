import torch

from specdec.core.sampling import probs_from_logits


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    cold = probs_from_logits(logits, 0.5)
    hot = probs_from_logits(logits, 2.0)
    assert cold[0, 0] > probs_from_logits(logits, 1.0)[0, 0] > hot[0, 0]
    assert torch.allclose(cold.sum(-1), torch.ones(1))


def test_top_k_keeps_k_best():
    probs = probs_from_logits(torch.tensor([[3.0, 2.0, 1.0, 0.0]]), 1.0, top_k=2)
    assert (probs[0, 2:] == 0).all() and (probs[0, :2] > 0).all()


def test_top_p_keeps_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert (probs_from_logits(logits, 1.0, top_p=0.7)[0] > 0).tolist() == [True, True, False, False]
    assert (probs_from_logits(logits, 1.0, top_p=0.5)[0] > 0).tolist() == [True, False, False, False]
    assert (probs_from_logits(logits, 1.0, top_p=0.01)[0] > 0).tolist() == [True, False, False, False]


def test_greedy_returns_plain_softmax_for_display():
    logits = torch.tensor([[1.0, 0.0]])
    assert torch.allclose(probs_from_logits(logits, 0.0, top_k=1), torch.softmax(logits, -1))


def test_tiny_temperature_is_the_greedy_limit_not_nan():
    # 30 / 1e-40 overflows float32: dividing first would put +inf at the best token and NaN in the row.
    logits = torch.tensor([[30.0, 29.0, -5.0], [-2.0, 7.5, 7.0]])
    for top_k, top_p in [(0, 1.0), (2, 1.0), (0, 0.9)]:
        probs = probs_from_logits(logits, 1e-40, top_k=top_k, top_p=top_p)
        assert torch.isfinite(probs).all()
        assert torch.equal(probs, torch.nn.functional.one_hot(logits.argmax(-1), 3).float())
    # ...while an ordinary temperature gives the same row as dividing first.
    torch.testing.assert_close(probs_from_logits(logits, 0.7), torch.softmax(logits / 0.7, -1))
