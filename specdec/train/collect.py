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
    tops, logps = top_labels(lm_head, hidden, chunk)
    return Sequence(ids.cpu(), hidden.to(torch.bfloat16).cpu(), tops, logps, answer_from)


def top_labels(lm_head, hidden: torch.Tensor, chunk: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden (n, H) -> the target's TOP most likely next tokens (n, TOP) and their log-probabilities (n, TOP)."""
    tops, logps = [torch.empty(0, TOP, dtype=torch.long)], [torch.empty(0, TOP)]
    for i in range(0, hidden.shape[0], chunk):
        top, logp = tops_of(lm_head(hidden[i : i + chunk]))
        tops.append(top)
        logps.append(logp)
    return torch.cat(tops), torch.cat(logps)


def tops_of(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (n, V) -> top ids (n, TOP) and their log-probabilities (n, TOP), on the host."""
    logits = logits.float()
    best = logits.topk(TOP, dim=-1)
    return best.indices.cpu(), (best.values - logits.logsumexp(dim=-1, keepdim=True)).cpu()


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
    the answer starts). The token that ends an answer has no feature yet and is left out.

    Two things keep the batch from computing what is thrown away: a row whose answer has ended leaves
    the batch (its cache rows with it), and each decode step's logits, computed anyway to pick the
    next token, are also that position's soft labels (the lm_head over the whole vocabulary is about
    a seventh of a token's work on this pair)."""
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
    prompt_hidden = [hidden[r, width - len(p) :] for r, p in enumerate(prompts)]  # (len(p), H) each
    feats, tokens, tops, logps = ([[] for _ in prompts] for _ in range(4))  # per prompt: its answer's rows
    live = list(range(rows))  # the prompt each row of the batch answers
    eos = torch.tensor(sorted(eos_ids), device=device)
    last = hidden[:, -1]  # (live, H) the feature of each row's last token
    for step in range(max_new_tokens):
        logits = target.lm_head(last)  # (live, V): the next token, and the soft labels of the last position
        token = logits.argmax(dim=-1)  # (live,)
        top, logp = tops_of(logits)
        for r, (i, t) in enumerate(zip(live, token.tolist())):  # one read of the step's tokens, not one per row
            tokens[i].append(t)
            tops[i].append(top[r])
            logps[i].append(logp[r])
        going = ~torch.isin(token, eos)  # (live,)
        if step == max_new_tokens - 1 or not bool(going.any()):
            break
        if not bool(going.all()):  # ended rows leave the batch
            keep = going.nonzero().flatten()
            cache.batch_select_indices(keep)
            mask, positions, token = mask[keep], positions[keep], token[keep]
            live = [live[r] for r in keep.tolist()]
        mask = torch.cat([mask, torch.ones(len(live), 1, dtype=mask.dtype, device=device)], dim=1)
        positions = positions[:, -1:] + 1
        hidden = target.model(input_ids=token[:, None], attention_mask=mask, position_ids=positions, cache=cache,
                              use_cache=True).last_hidden_state  # (live, 1, H)
        last = hidden[:, -1]
        for r, i in enumerate(live):
            feats[i].append(last[r])
    out = []
    for i, p in enumerate(prompts):
        n = len(feats[i])  # answer tokens fed back (the ending one never is)
        before_top, before_logp = top_labels(target.lm_head, prompt_hidden[i][:-1])  # the prompt's positions but its last
        hidden_i = torch.cat([prompt_hidden[i], *[f[None] for f in feats[i]]])  # (len(p) + n, H)
        out.append(Sequence(torch.tensor(p + tokens[i][:n]), hidden_i.to(torch.bfloat16).cpu(),
                            torch.cat([before_top, torch.stack(tops[i][: n + 1])]),
                            torch.cat([before_logp, torch.stack(logps[i][: n + 1])]), len(p)))
    return out
