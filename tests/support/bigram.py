"""A pair built for sampling tests: causal LMs whose logits are a hand-set bigram table, a word
tokenizer, and the chi-square test of one run's transitions against the target's processed rows
(tests/test_engine_sampling.py says why)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from scipy.stats import chi2

from specdec.core import sampling
from specdec.core.config import GenerationConfig
from tests.support.runs import run_checked, tokens

SIGNIFICANCE = 1e-3  # a correct engine fails this once in a thousand seeds (the seed is fixed)
VOCAB = 8
TEMPERATURE, TOP_K, TOP_P = 0.5, 6, 0.95  # all three change the distribution here
CONFIG = GenerationConfig(k=3, temperature=TEMPERATURE, top_k=TOP_K, top_p=TOP_P, max_new_tokens=1024, seed=11)


class BigramLM(torch.nn.Module):
    """A causal LM whose next-token logits are row `last token` of a fixed (V, V) table, whatever
    came before. It has the interface the engine runs a model through (specdec.core.runners: a
    decoder that takes input ids and extends a transformers cache, returning its final hidden
    states; an output head that turns them into logits), at next to no cost per pass: the hidden
    state of a token is its one-hot row, and the head holds the table."""

    def __init__(self, table: torch.Tensor):
        from transformers import Qwen2Config

        super().__init__()
        v = table.shape[0]
        self.config = Qwen2Config(vocab_size=v, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1)
        self.head = torch.nn.Linear(v, v, bias=False)  # one-hot of the last token -> its row of the table
        with torch.no_grad():
            self.head.weight.copy_(table.T)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.head.weight.dtype

    def get_output_embeddings(self):
        return self.head

    def get_input_embeddings(self):
        return lambda ids: torch.nn.functional.one_hot(ids, self.head.in_features).float()

    def get_decoder(self):
        return self.decode

    def decode(self, input_ids, cache, use_cache=True, **kwargs):
        n = input_ids.shape[1]
        empty = torch.zeros(1, 1, n, 8)  # (1, kv heads, n, head dim) of the config above
        cache.update(empty, empty, 0)  # the cache counts positions (rollback is the engine's), nothing is attended
        return SimpleNamespace(last_hidden_state=self.get_input_embeddings()(input_ids))  # (1, n, V)

    def forward(self, input_ids, cache, use_cache=True, logits_to_keep=0, **kwargs):
        hidden = self.decode(input_ids, cache).last_hidden_state  # (1, n, V)
        return SimpleNamespace(logits=self.head(hidden[:, -logits_to_keep:] if logits_to_keep else hidden))


def word_tokenizer(v: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(v)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core)


def parity_table(rows: torch.Tensor) -> torch.Tensor:
    """(2, V) -> (V, V): the next token's logits depend on whether the last token is even or odd.
    Two contexts keep the counts per context high; that they differ makes a wrong row show."""
    return rows[torch.arange(rows.shape[1]) % 2]


def transition_p_value(pair, target_logits, config) -> float:
    """Pearson's chi-square over one run's transition counts against the target's processed rows:
    every emitted token against the row of the token before it. Cells expected below 5 in a row are
    pooled; a token the target's row rules out (top-k / top-p) fails at once."""
    p = sampling.probs_from_logits(target_logits, TEMPERATURE, TOP_K, TOP_P).double()  # (V, V)
    seq = [0, 1] + tokens(run_checked(pair, "t0 t1", config))
    counts = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    for a, b in zip(seq[1:-1], seq[2:]):
        counts[a, b] += 1
    if (counts[p == 0] > 0).any():
        return 0.0
    stat, dof = 0.0, 0
    for observed, prob in zip(counts, p):
        expected = observed.sum() * prob
        big, small = expected >= 5, (expected < 5) & (prob > 0)
        cells_e = torch.cat([expected[big], expected[small].sum().reshape(1)])
        cells_o = torch.cat([observed[big], observed[small].sum().reshape(1)])
        keep = cells_e > 0
        if keep.sum() >= 2:
            stat += float(((cells_o[keep] - cells_e[keep]) ** 2 / cells_e[keep]).sum())
            dof += int(keep.sum()) - 1
    assert dof > 0
    return float(chi2.sf(stat, dof))
