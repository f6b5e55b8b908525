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


def fused_layers(config) -> tuple[int, int]:
    """The indices into a forward pass's hidden_states (0: the embeddings, i: after layer i, the last:
    after the final norm) of the low and middle layers whose rows EAGLE-3 fuses with the last one's:
    after layers 4 and 14 of the 1.5B target's 28."""
    n = config.num_hidden_layers
    return n // 8 + 1, n // 2


def kept_layers(output, layers: tuple[int, int] | None) -> torch.Tensor | None:
    """A forward pass's output -> (..., 2, H) its rows after the `layers` (None: not asked for)."""
    if layers is None:
        return None
    return torch.stack([output.hidden_states[i] for i in layers], dim=-2)


def labelled(lm_head, ids: torch.Tensor, hidden: torch.Tensor, answer_from: int = 0, chunk: int = 128,
             layers: torch.Tensor | None = None) -> Sequence:
    """ids (n,), hidden (n, H) -> the Sequence, with the target's top tokens and log-probabilities
    at every position (its lm_head over the whole vocabulary, a few rows at a time); layers (n, 2, H)
    the low and middle layers' rows where kept."""
    tops, logps = top_labels(lm_head, hidden, chunk)
    kept = layers.to(torch.bfloat16).cpu() if layers is not None else None
    return Sequence(ids.cpu(), hidden.to(torch.bfloat16).cpu(), tops, logps, answer_from, kept)


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
def read_features(target, chunks: list[list[int]], layers: tuple[int, int] | None = None) -> list[Sequence]:
    """One pass per chunk (chunks of equal length go together in one batch): the features of every
    position, and the rows of `layers` (fused_layers) where asked."""
    device = target.device
    out: dict[int, Sequence] = {}
    by_length: dict[int, list[int]] = {}
    for i, chunk in enumerate(chunks):
        by_length.setdefault(len(chunk), []).append(i)
    for _, members in sorted(by_length.items()):
        ids = torch.tensor([chunks[i] for i in members], device=device)  # (b, n)
        output = target.model(input_ids=ids, use_cache=False, output_hidden_states=layers is not None)
        hidden, low_mid = output.last_hidden_state, kept_layers(output, layers)  # (b, n, H), (b, n, 2, H) or None
        for row, i in enumerate(members):
            out[i] = labelled(target.lm_head, ids[row], hidden[row], layers=low_mid[row] if low_mid is not None else None)
    return [out[i] for i in range(len(chunks))]


def left_padded(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """-> ids and attention mask (rows, width), each row's last prompt token in the last column."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :] = torch.tensor(p, device=device)
        mask[r, width - len(p) :] = 1
    return ids, mask


@torch.inference_mode()
def answer(target, prompts: list[list[int]], max_new_tokens: int, eos_ids: set[int], pad_id: int,
           layers: tuple[int, int] | None = None) -> list[Sequence]:
    """The target's greedy answers to a batch of prompts (token ids, chat template applied), each as
    one sequence: the prompt and the answer's tokens with their features (answer_from marks where
    the answer starts). The token that ends an answer has no feature yet and is left out.

    Two things keep the batch from computing what is thrown away: a row whose answer has ended leaves
    the batch (its cache rows with it), and each decode step's logits, computed anyway to pick the
    next token, are also that position's soft labels (the lm_head over the whole vocabulary is about
    a seventh of a token's work on this pair). `layers` (fused_layers): also keep those layers' rows."""
    from transformers import DynamicCache

    ids, mask = left_padded(prompts, pad_id, target.device)
    device, (rows, width) = target.device, ids.shape
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    cache = DynamicCache(config=target.config)
    asked = layers is not None
    output = target.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                          output_hidden_states=asked)
    hidden, low_mid = output.last_hidden_state, kept_layers(output, layers)  # (rows, width, H), (rows, width, 2, H) or None
    prompt_hidden = [hidden[r, width - len(p) :] for r, p in enumerate(prompts)]  # (len(p), H) each
    prompt_layers = [low_mid[r, width - len(p) :] if asked else None for r, p in enumerate(prompts)]
    feats, tokens, tops, logps, rows_kept = ([[] for _ in prompts] for _ in range(5))  # per prompt: its answer's rows
    live, eos = list(range(rows)), torch.tensor(sorted(eos_ids), device=device)  # live: the prompt each row of the batch answers
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
        output = target.model(input_ids=token[:, None], attention_mask=mask, position_ids=positions, cache=cache,
                              use_cache=True, output_hidden_states=asked)
        last, low_mid = output.last_hidden_state[:, -1], kept_layers(output, layers)  # (live, H), (live, 1, 2, H) or None
        for r, i in enumerate(live):
            feats[i].append(last[r])
            if asked:
                rows_kept[i].append(low_mid[r, -1])
    out = []
    for i, p in enumerate(prompts):
        n = len(feats[i])  # answer tokens fed back (the ending one never is)
        before_top, before_logp = top_labels(target.lm_head, prompt_hidden[i][:-1])  # the prompt's positions but its last
        hidden_i = torch.cat([prompt_hidden[i], *[f[None] for f in feats[i]]])  # (len(p) + n, H)
        layers_i = torch.cat([prompt_layers[i], *[x[None] for x in rows_kept[i]]]).to(torch.bfloat16).cpu() if asked else None
        out.append(Sequence(torch.tensor(p + tokens[i][:n]), hidden_i.to(torch.bfloat16).cpu(),
                            torch.cat([before_top, torch.stack(tops[i][: n + 1])]),
                            torch.cat([before_logp, torch.stack(logps[i][: n + 1])]), len(p), layers_i))
    return out
