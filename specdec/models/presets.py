"""The model pairs the project knows by name: which target and draft, and what they need."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PairPreset:
    name: str
    target_id: str  # Hub id of the target model
    draft_id: str  # Hub id of the draft model
    description: str
    bundle: str | None = None  # name of the offline bundle that provides this pair, if any
    needs_gpu: bool = False  # too slow to be useful on a CPU
    licence: str = ""
    chat: bool = True  # instruction-tuned: wrap prompts in the chat template by default
    params_b: float = 0.0  # billions of parameters of target + draft as loaded: sizes the memory check


PRESETS: dict[str, PairPreset] = {
    p.name: p
    for p in [
        PairPreset(
            name="qwen2.5-coder-1.5b/0.5b",
            target_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            draft_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            description="Qwen2.5-Coder 1.5B checked by a 0.5B draft; runs on a laptop CPU",
            bundle="qwen2.5-coder-gguf",
            licence="Apache-2.0",
            params_b=2.4,  # the converted bundle stores the output embeddings apart: 1.78 B + 0.63 B
        ),
        PairPreset(
            name="qwen2.5-coder-7b/0.5b",
            target_id="Qwen/Qwen2.5-Coder-7B-Instruct",
            draft_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            description="Qwen2.5-Coder 7B checked by a 0.5B draft; wants a GPU (about 16 GB in bf16)",
            needs_gpu=True,
            licence="Apache-2.0",
            params_b=8.1,  # 7.62 B + 0.49 B
        ),
        PairPreset(
            name="qwen2.5-coder-14b/0.5b",
            target_id="Qwen/Qwen2.5-Coder-14B-Instruct",
            draft_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            description="Qwen2.5-Coder 14B checked by a 0.5B draft; a GPU with about 31 GB for the weights in bf16",
            needs_gpu=True,
            licence="Apache-2.0",
            params_b=15.2,  # 14.7 B + 0.49 B (the model cards' counts)
        ),
        PairPreset(
            name="qwen2.5-coder-32b/0.5b",
            target_id="Qwen/Qwen2.5-Coder-32B-Instruct",
            draft_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            description="Qwen2.5-Coder 32B checked by a 0.5B draft; a large GPU (about 66 GB in bf16: ZeroGPU's xlarge, an H200)",
            needs_gpu=True,
            licence="Apache-2.0",
            params_b=33.0,  # 32.5 B + 0.49 B (the model cards' counts)
        ),
        PairPreset(
            name="smollm2-1.7b/135m",
            target_id="HuggingFaceTB/SmolLM2-1.7B-Instruct",
            draft_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            description="SmolLM2 1.7B checked by a 135M draft",
            licence="Apache-2.0",
            params_b=1.85,  # 1.71 B + 0.135 B
        ),
        PairPreset(
            name="tiny-random",
            target_id="(built in code)",
            draft_id="(built in code)",
            description="tiny random models built in code, for tests and offline checks (output is gibberish)",
            licence="(none: generated)",
            chat=False,
        ),
    ]
}
DEFAULT_PAIR = "qwen2.5-coder-1.5b/0.5b"


def get_preset(name: str) -> PairPreset:
    if name not in PRESETS:
        raise ValueError(f"pair must be one of {', '.join(PRESETS)}, got {name!r}")
    return PRESETS[name]
