"""tiny-random: a small Qwen2-style pair built in code, for tests and offline checks.

No download: the tokenizer is a byte-level BPE trained here on a fixed text, the target has
seeded random weights, and the draft is a copy of the target with noise added to every weight, so
the two agree often but not always (greedy acceptance about 0.4, sampled about 0.55). The draft is
as large as the target, so tiny-random shows the mechanics, not a speedup.
"""

from __future__ import annotations

import torch

CORPUS = """def add(a, b):
    return a + b

for i in range(10):
    print(i, i * i)

The quick brown fox jumps over the lazy dog. Speculative decoding drafts tokens with a small
model and checks them with a large one. Grüße aus Köln, 東京 と 大阪, naïve café.
SELECT name, count(*) FROM users WHERE age > 30 GROUP BY name;
{"id": 1, "tags": ["a", "b"], "ok": true}
"""
EOS = "<|endoftext|>"
VOCAB_SIZE = 320
LAYERS = 4
DRAFT_NOISE = 0.02  # relative noise on the draft's copied weights; sets how often draft and target agree


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator([CORPUS] * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=EOS)


def build_models(vocab_size: int, eos_id: int, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    def config(layers: int) -> Qwen2Config:
        return Qwen2Config(
            vocab_size=vocab_size,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            initializer_range=0.2,  # large enough that logits are peaked and greedy choices clear
            tie_word_embeddings=True,
            eos_token_id=eos_id,
            bos_token_id=None,
            pad_token_id=eos_id,
        )

    torch.manual_seed(seed)
    target = Qwen2ForCausalLM(config(LAYERS)).eval()
    draft = Qwen2ForCausalLM(config(LAYERS)).eval()
    # The draft is the target plus noise: related, not equal.
    own = dict(target.state_dict())
    noise = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, weight in draft.state_dict().items():
            source = own[name]
            weight.copy_(source + DRAFT_NOISE * source.std() * torch.randn(source.shape, generator=noise))
    for model in (target, draft):
        model.generation_config.eos_token_id = eos_id
        model.generation_config.pad_token_id = eos_id
    return target, draft


def build_tiny(device: torch.device, dtype: torch.dtype):
    """(tokenizer, target, draft) on `device` in `dtype`; models.py wraps them in a ModelPair, so this
    module depends on nothing else in the package."""
    tokenizer = build_tokenizer()
    target, draft = build_models(len(tokenizer), tokenizer.eos_token_id)
    return tokenizer, target.to(device=device, dtype=dtype), draft.to(device=device, dtype=dtype)
