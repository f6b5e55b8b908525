"""How a head is trained (the recipe, recorded in the head file) and how much (the plan, fixed once per run).

The recipe's defaults were chosen by measurement on the embedded pair (docs/benchmarks.md, "A head
trained here" and "The head's ablations at equal data"). The plan says how much data and how many optimizer steps: `--minutes` decides it on
the machine at hand (the data phases run until their share of the time is spent, the step count
follows from the first steps' speed), and it is written into the working folder and the head file,
so the same plan given explicitly (`--answers`, `--code-tokens`, `--steps`) with the same seed
trains the same head again on the same installation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Recipe:
    intermediate: int = 2048  # the head's MLP width (the target's is 8960: 41M of a full layer's 51.5M parameters)
    depth: int = 3  # draft steps trained from every position (EAGLE-3's training-time test; 1 = EAGLE-1)
    init: str = "random"  # "random", or "last-layer": attention, norms and the strongest MLP channels of the target's last layer (the shipped head's start; random learned faster at equal data, docs/benchmarks.md)
    window: int = 512  # positions per training sequence (the head's context)
    batch_positions: int = 2048  # positions per optimizer step
    alike: int = 256  # windows sorted by length together before batches are cut (0: batches in random order, as heads before it were trained)
    lr: float = 1e-3  # peak learning rate (AdamW), after a warmup of 5% of the steps, cosine to 10%
    reg_weight: float = 1.0  # weight of the feature regression beside the cross-entropy
    step_decay: float = 0.8  # weight of draft step s is step_decay ** (s - 1)
    vocab: int = 32768  # tokens the head drafts from when judged (the v32k subset); the loss covers the target's top tokens
    chunk: int = 512  # tokens per target pass over read text
    answer_tokens: int = 128  # most tokens of one self-distilled answer (the bench asks for 64)
    answer_batch: int = 64  # prompts answered together (a decode step of 64 rows costs little more than one of 16)
    val_answers: int = 32  # held-out self-distilled answers (the validation figures)
    val_chunks: int = 16  # held-out chunks of read text
    eval_depth: int = 6  # draft positions the validation figures cover
    fusion: bool = False  # EAGLE-3's features: the target's low and middle layers' rows fused with its last (3H -> H) into the head's input; the data keeps them (an ablation: a tie with the last layer alone at equal data, docs/benchmarks.md)
    prompts: int = 2  # the written prompts' version (specdec/train/prompts.py): 1, templates alone (the shipped head's data); 2, also tasks and sentences from the installed text, and generated SQL schemas

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def recorded(cls, record: dict) -> "Recipe":
        """The recipe a working folder or head file recorded. A field added since ran as before it was
        added: its default, or BEFORE_RECORDED where the default has changed since."""
        return cls(**{**BEFORE_RECORDED, **{k: v for k, v in record.items() if k in cls.names()}})


# What a record written before a field existed ran with, where that is not the field's default now.
BEFORE_RECORDED = {"prompts": 1}


@dataclass
class Plan:
    """How much: None until decided (by the time budget, or given)."""

    seed: int = 0
    minutes: float = 60.0  # the whole command's budget, data and training together
    answers: int | None = None  # prompts answered for training (beyond the held-out ones)
    code_tokens: int | None = None  # tokens of read text for training
    steps: int | None = None  # optimizer steps

    def as_dict(self) -> dict:
        return asdict(self)
