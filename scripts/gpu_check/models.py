"""The models the check runs: the real shapes of the Qwen2.5-Coder 0.5B, 1.5B and 7B with random
weights (nothing downloaded), or tiny models of the same structure for the CPU dry run's test."""

from __future__ import annotations

import torch

# From the public config.json files of Qwen/Qwen2.5-Coder-1.5B-Instruct, -0.5B-Instruct and -7B-Instruct.
COMMON = dict(rope_theta=1_000_000.0, max_position_embeddings=32768, hidden_act="silu", rms_norm_eps=1e-6,
              bos_token_id=None, eos_token_id=None, pad_token_id=None)
SHAPES = {
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, tie_word_embeddings=True),
    "1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, tie_word_embeddings=True),
    "7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, tie_word_embeddings=False),
}
# The same structure at toy widths (the test of the dry run): grouped query heads, a tied head but
# for the "7b", whose vocabulary is padded past the others' as the real one is.
TINY = {
    "0.5b": dict(vocab_size=512, hidden_size=56, intermediate_size=96, num_hidden_layers=2, num_attention_heads=7,
                 num_key_value_heads=1, tie_word_embeddings=True),
    "1.5b": dict(vocab_size=512, hidden_size=96, intermediate_size=160, num_hidden_layers=2, num_attention_heads=6,
                 num_key_value_heads=2, tie_word_embeddings=True),
    "7b": dict(vocab_size=520, hidden_size=128, intermediate_size=192, num_hidden_layers=2, num_attention_heads=8,
               num_key_value_heads=4, tie_word_embeddings=False),
}
PAIRS = {"1.5b/0.5b": ("1.5b", "0.5b"), "7b/0.5b": ("7b", "0.5b")}
DRAFT = "0.5b"


class Chars:
    """Stands in for a tokenizer: one character per id, so the engine's text tracking works."""

    eos_token_id = None
    chat_template = None

    def decode(self, ids, **_):
        return "".join(chr(0x4E00 + i % 20000) for i in ids)


def shapes(args) -> dict[str, dict]:
    return TINY if args.tiny else SHAPES


def shared_vocab(args) -> int:
    """The logit columns both models of a pair share."""
    return min(shape["vocab_size"] for shape in shapes(args).values())


def token_ids(n: int, args, step: int = 7919, offset: int = 13) -> list[int]:
    """n made-up token ids, every one in both models' vocabularies."""
    return [(i * step + offset) % min(1000, shared_vocab(args)) for i in range(n)]


def build(name: str, args) -> torch.nn.Module:
    """A model of these shapes with random weights, made on the device in the run's dtype."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = dict(COMMON, **shapes(args)[name])
    if args.layers:
        config["num_hidden_layers"] = args.layers
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(args.dtype)  # made in the dtype: a 7B never exists in fp32
    try:
        with torch.device(args.device):
            return Qwen2ForCausalLM(Qwen2Config(**config)).eval()
    finally:
        torch.set_default_dtype(default)


def force_acceptance(models: dict) -> None:
    """Zero every attention and MLP output projection: each layer adds nothing to the residual
    stream, so the logits are norm(embedding(t)) against the head, whose argmax is t itself for
    random near-orthogonal embeddings when the head is the embedding (an untied head, the 7B's, is
    set to it): both models repeat the last token, every draft is accepted. In place: the captured
    graphs read the same memory."""
    with torch.no_grad():
        for module in models.values():
            for layer in module.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
            head, embed = module.get_output_embeddings().weight, module.get_input_embeddings().weight
            if head.data_ptr() != embed.data_ptr():
                head.copy_(embed)
