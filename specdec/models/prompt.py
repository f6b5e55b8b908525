"""A prompt as the models see it: token ids, through the chat template when asked for.

One definition for this project's engine (ModelPair.encode_prompt) and the remote engines
(specdec.engines.remote), so a llama.cpp or vLLM server is sent exactly the ids our engine decodes.
"""

from __future__ import annotations


def template_prompt(tokenizer, prompt: str, chat: bool) -> list[int]:
    """The prompt's token ids: the chat template (one user turn, then the assistant's opening) when
    `chat` is asked for and the tokenizer has one, else the text as it is."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt must be non-empty text")
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])
