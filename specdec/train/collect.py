"""The target's features: read over text in large chunks, and collected while it answers prompts.

Both are plain forward passes of the target as loaded (`target.model(...).last_hidden_state`, after
its final norm), in the pair's dtype. Reading is fastest in long rows (each matrix product then
has hundreds of rows: docs/benchmarks.md, "A head trained here"); answering runs a batch of
prompts together, left-padded, greedily, so each step of the batch is one product with a row per
prompt, and the features of every step are kept as they come.
"""

from __future__ import annotations

import torch

from specdec.train.data import TOP, Sequence


def labelled(lm_head, ids: torch.Tensor, hidden: torch.Tensor, answer_from: int = 0, chunk: int = 128) -> Sequence:
    """ids (n,), hidden (n, H) -> the Sequence, with the target's top tokens and log-probabilities
    at every position (its lm_head over the whole vocabulary, a few rows at a time)."""
    tops, logps = [], []
    for i in range(0, hidden.shape[0], chunk):
        logits = lm_head(hidden[i : i + chunk]).float()  # (c, V)
        best = logits.topk(TOP, dim=-1)
        tops.append(best.indices.cpu())
        logps.append((best.values - logits.logsumexp(dim=-1, keepdim=True)).cpu())
    return Sequence(ids.cpu(), hidden.to(torch.bfloat16).cpu(), torch.cat(tops), torch.cat(logps), answer_from)


@torch.inference_mode()
def read_features(target, chunks: list[list[int]]) -> list[Sequence]:
    """One pass per chunk (chunks of equal length go together in one batch): the features of every position."""
    device = target.device
    out: dict[int, Sequence] = {}
    by_length: dict[int, list[int]] = {}
    for i, chunk in enumerate(chunks):
        by_length.setdefault(len(chunk), []).append(i)
    for _, members in sorted(by_length.items()):
        ids = torch.tensor([chunks[i] for i in members], device=device)  # (b, n)
        hidden = target.model(input_ids=ids, use_cache=False).last_hidden_state  # (b, n, H)
        for row, i in enumerate(members):
            out[i] = labelled(target.lm_head, ids[row], hidden[row])
    return [out[i] for i in range(len(chunks))]


@torch.inference_mode()
def answer(target, prompts: list[list[int]], max_new_tokens: int, eos_ids: set[int], pad_id: int) -> list[Sequence]:
    """The target's greedy answers to a batch of prompts (token ids, chat template applied), each as
    one sequence: the prompt and the answer's tokens with their features (answer_from marks where
    the answer starts). The token that ends an answer has no feature yet and is left out."""
    from transformers import DynamicCache

    device, rows, width = target.device, len(prompts), max(len(p) for p in prompts)
    ids = torch.full((rows, width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(rows, width, dtype=torch.long, device=device)
    for r, p in enumerate(prompts):  # left padding: every row's last prompt token in the last column
        ids[r, width - len(p) :] = torch.tensor(p, device=device)
        mask[r, width - len(p) :] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    cache = DynamicCache(config=target.config)
    hidden = target.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True).last_hidden_state
    steps = [hidden]  # (rows, width, H), then (rows, 1, H) per step
    tokens, fed = [], torch.zeros(rows, dtype=torch.long)  # fed: answer tokens whose features we have
    done = torch.zeros(rows, dtype=torch.bool)
    eos = torch.tensor(sorted(eos_ids), device=device)
    for step in range(max_new_tokens):
        token = target.lm_head(hidden[:, -1]).argmax(dim=-1)  # (rows,)
        tokens.append(token.cpu())
        done |= torch.isin(token, eos).cpu()
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        fed += (~done).long()
        mask = torch.cat([mask, torch.ones(rows, 1, dtype=mask.dtype, device=device)], dim=1)
        positions = positions[:, -1:] + 1
        hidden = target.model(input_ids=token[:, None], attention_mask=mask, position_ids=positions, cache=cache,
                              use_cache=True).last_hidden_state
        steps.append(hidden)
    generated = torch.stack(tokens, dim=1)  # (rows, steps)
    out = []
    for r, p in enumerate(prompts):
        n = int(fed[r])
        seq_ids = torch.cat([torch.tensor(p), generated[r, :n]]).to(device)
        feats = torch.cat([steps[0][r, width - len(p) :], *[s[r] for s in steps[1 : 1 + n]]])
        out.append(labelled(target.lm_head, seq_ids, feats, answer_from=len(p)))
    return out
