"""The draft head at run time (specdec/core/head.py): the same arithmetic as training, positions that
line up with the drafting protocol, the truncated vocabulary; its stored file (specdec/kernels/head_store.py)."""

import pytest
import torch
from torch import nn

from specdec.core.head import HeadRun, HeadShape, HeadWeights, RMSNorm, subset_logits
from specdec.train.unroll import unroll


def random_head(seed=0, hidden=32, dtype=torch.float64):
    torch.manual_seed(seed)
    head = HeadWeights(HeadShape(hidden, 4, 2, hidden // 4, 48, 10000.0, 1e-6)).to(dtype)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(std=0.3)
    return head


def test_extend_and_steps_are_the_training_unroll():
    """Step s of the training-time unroll from position t is what HeadRun computes after extending the
    real pairs 0..t and drafting s-1 steps: the same masks, the same rotary positions."""
    head, vocab, length, depth = random_head(), 50, 12, 4
    embed, lm_head = nn.Embedding(vocab, 32).double(), nn.Linear(32, vocab, bias=False).double()
    ids, feats = torch.randint(0, vocab, (length,)), torch.randn(length, 32, dtype=torch.float64)
    with torch.no_grad():
        steps = unroll(head, feats[None], embed(ids)[None], depth)
    checked = 0
    for t in range(length - 1):
        run = HeadRun(head, embed, lm_head, capacity=2)  # grows while extending
        out = run.extend(feats[: t + 1], ids[1 : t + 2])
        assert torch.allclose(out[0], steps[0][0, t], atol=1e-12)
        for s in range(2, min(depth, length - 1 - t) + 1):
            out = run.step(out, ids[t + s : t + s + 1])
            assert torch.allclose(out[0], steps[s - 1][0, t], atol=1e-12), (t, s)
            checked += 1
        assert run.length == t + min(depth, length - 1 - t)
    assert checked > 20


def test_crop_forgets_drafts_and_extending_in_pieces_is_extending_at_once():
    head = random_head(1)
    embed, lm_head = nn.Embedding(40, 32).double(), nn.Linear(32, 40, bias=False).double()
    ids, feats = torch.randint(0, 40, (10,)), torch.randn(10, 32, dtype=torch.float64)
    whole = HeadRun(head, embed, lm_head).extend(feats[:9], ids[1:10])
    run = HeadRun(head, embed, lm_head)
    out = run.extend(feats[:4], ids[1:5])
    for _ in range(3):  # drafts on wrong tokens, then forgotten
        out = run.step(out, torch.tensor([7]))
    run.crop(4)
    assert run.length == 4
    assert torch.allclose(run.extend(feats[4:9], ids[5:10]), whole, atol=1e-12)
    different = HeadRun(head, embed, lm_head).extend(feats[:9], torch.roll(ids[1:10], 1))
    assert not torch.allclose(different, whole)  # the check can fail: the tokens do matter


# --- the drafting protocol, on a target whose greedy continuation is known ------------------------
#
# Tokens 0..V-1; the toy target's greedy next token is x + 1 (mod V), and its feature at position t
# is 4 * onehot(next(x_t)) (so its lm_head, the identity, predicts x_{t+1}). The head reads
# 2 * its (normalised) feature and 1 * the token's (normalised) one-hot embedding, both through the
# same map `rule`, and returns that (attention and MLP switched off): a single peak when the feature
# and the token it is handed belong to the same position, the feature's peak winning when they do
# not. Its rule follows the target except after token 5.

V = 16


def target_next(x: int) -> int:
    return (x + 1) % V


def head_rule(x: int) -> int:
    return 7 if x == 5 else target_next(x)


def toy():
    head = HeadWeights(HeadShape(V, 2, 1, 8, 4, 10000.0, 1e-6)).double()
    rule = torch.zeros(V, V, dtype=torch.float64)
    for x in range(V):
        rule[head_rule(x), x] = 1.0
    with torch.no_grad():
        for p in head.parameters():
            p.zero_()
        for module in head.modules():
            if isinstance(module, RMSNorm):
                module.weight.fill_(1.0)
        head.fc.weight.copy_(torch.cat([2.0 * rule, 1.0 * rule], dim=1))
    embed = nn.Embedding(V, V).double()
    lm_head = nn.Linear(V, V, bias=False).double()
    with torch.no_grad():
        embed.weight.copy_(torch.eye(V))
        lm_head.weight.copy_(torch.eye(V))
    return head, embed, lm_head


def features(seq: list[int]) -> torch.Tensor:
    return 4.0 * torch.eye(V, dtype=torch.float64)[[target_next(x) for x in seq]]  # (n, V)


def drafting_run(shift: int, k: int = 3, prompt_len: int = 6, total: int = 40) -> tuple[list[int], list[tuple[list, list]]]:
    """The drafter's protocol with the toy pair; `shift` hands the head features that many positions
    late (a misalignment). -> the sequence and, per step, (drafts, what the head's rule predicts, accepted)."""
    head, embed, lm_head = toy()
    seq = list(range(prompt_len))
    run = HeadRun(head, embed, lm_head)
    f = features(seq)
    out = run.extend(f[: prompt_len - 1], torch.tensor(seq[1:]))  # after the target's prefill over prompt[:-1]
    steps = []
    while len(seq) < total:
        drafts = []
        for i in range(k):
            drafts.append(int(run.logits(out).argmax()))
            if i < k - 1:
                out = run.step(out, torch.tensor(drafts[-1:]))
        expected = [head_rule(seq[-1])]
        while len(expected) < k:
            expected.append(head_rule(expected[-1]))
        b = len(seq)  # the check fed seq[-1] (position b-1) and the drafts
        greedy, n = [target_next(seq[-1])], 0
        while n < k and drafts[n] == greedy[-1]:
            n += 1
            greedy.append(target_next(drafts[n - 1]))
        steps.append((drafts, expected, n))
        seq += drafts[:n] + [greedy[n]]
        f = features(seq)
        run.crop(b - 1)
        out = run.extend(f[b - 1 + shift : b + n + shift], torch.tensor(seq[b : b + n + 1]))
        assert run.length == len(seq) - 1
    return seq, steps


def test_positions_line_up_with_the_drafting_protocol():
    """Kept features f_{b-1}..f_{b-1+n} with the tokens at b..b+n: every draft is the head's rule
    applied to the last token, so drafts are accepted until the rule departs from the target's."""
    seq, steps = drafting_run(shift=0)
    assert seq == [i % V for i in range(len(seq))]  # the target's greedy text, whatever was drafted
    assert all(drafts == expected for drafts, expected, _ in steps)
    accepted = [n for _, _, n in steps]
    assert min(accepted) < 3  # the rule departs after token 5: some drafts were rejected
    assert sum(accepted) > len(steps)  # and most were accepted


def test_a_misaligned_protocol_is_caught():
    """The same run with features handed one position late drafts something else: the check above can fail."""
    with pytest.raises(AssertionError):
        seq, steps = drafting_run(shift=1)
        assert all(drafts == expected for drafts, expected, _ in steps)


def test_subset_logits_fill_minus_infinity_outside_the_subset():
    torch.manual_seed(0)
    lm_head = nn.Linear(8, 20, bias=False)
    ids = torch.tensor([1, 4, 5, 19])
    x = torch.randn(2, 8)
    full = lm_head(x)
    for head in (subset_logits(lm_head, ids), subset_logits(lambda f: lm_head(f), ids)):  # sliced, and computed then masked
        out = head(x)
        assert out.shape == (2, 20)
        assert torch.allclose(out[:, ids], full[:, ids], atol=1e-6)
        rest = torch.ones(20, dtype=torch.bool)
        rest[ids] = False
        assert torch.isneginf(out[:, rest]).all()
    assert subset_logits(lm_head, None) is lm_head
