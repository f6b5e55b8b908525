"""How faithful each target kernel was measured to be to the dense target, per model pair: what the
page's Target kernel dropdown and status line say of each kernel.

The figures come from the bench (`python -m specdec bench --target-kernel dense,...` with the bench
prompts; specdec/measure/faithfulness.py says what they mean): the top-1 agreement with the `dense`
kernel's greedy output under teacher forcing, over every position and over the positions where its
own best two logits are not tied, on how many prompts the kernel's own greedy text departed from
the dense kernel's within the tokens compared, and the KL divergence of its next-token distribution from
the dense kernel's along the same text (for a server, its top-20 lower bound). They are recorded here from the run in
docs/benchmarks.md, like the measured defaults of draft variants; a pair or kernel
not measured says so rather than borrowing another's figures.
"""

from __future__ import annotations

from dataclasses import dataclass

REFERENCE_KERNEL = "dense"  # the dense target as converted from the GGUF: what every kernel is judged against


@dataclass(frozen=True)
class Measured:
    top1: float  # mean over the prompts of the teacher-forced top-1 agreement with the dense kernel's output
    departed: int  # prompts on which the kernel's greedy text left the dense kernel's within `tokens`
    prompts: int  # prompts measured
    tokens: int  # new tokens compared per prompt
    top1_untied: float | None = None  # the same agreement where the dense kernel's own top-2 logits are not tied
    tied: int | None = None  # positions, over all prompts, where they are
    kl: float | None = None  # mean KL(dense || kernel) in nats along the dense kernel's output, the whole vocabulary
    kl_top: float | None = None  # its lower bound over dense's 20 most likely tokens and the rest (all a server lists)


# What the recorded bench run measured, one row per (pair, kernel or real engine's plain mode)
# (docs/benchmarks.md, "KL divergence from the dense target"): a 2-core Intel Xeon with AVX-512 BF16, VNNI and
# AMX, the pair in bf16, six bench prompts, 64 tokens; the dense kernel's own top-2 logits were tied (within
# 0.5) at 25 of the 384 positions. llama-server lists its 40 most likely tokens: its KL is the top-20 bound.
_PAIR = "qwen2.5-coder-1.5b/0.5b"
RECORDED: tuple[tuple[str, str, Measured], ...] = (
    (_PAIR, "q4k", Measured(top1=0.995, departed=1, prompts=6, tokens=64, top1_untied=1.000, tied=25, kl=0.00019, kl_top=0.00019)),
    (_PAIR, "w8a8", Measured(top1=0.995, departed=2, prompts=6, tokens=64, top1_untied=1.000, tied=25, kl=0.00072, kl_top=0.00071)),
    (_PAIR, "w4a8", Measured(top1=0.995, departed=2, prompts=6, tokens=64, top1_untied=1.000, tied=25, kl=0.00045, kl_top=0.00044)),
    (_PAIR, "llamacpp_plain", Measured(top1=0.997, departed=1, prompts=6, tokens=64, top1_untied=1.000, tied=25, kl_top=0.00048)),
)
MEASURED: dict[tuple[str, str], Measured] = {(pair, name): m for pair, name, m in RECORDED}


def faithfulness_note(pair_name: str, kernel: str) -> str:
    """A few words for the status line: how closely `kernel` follows the dense target on this pair."""
    if kernel == REFERENCE_KERNEL:
        return "the dense target itself"
    m = MEASURED.get((pair_name, kernel))
    if m is None:
        return "faithfulness to the dense target not measured for this pair"
    untied = "" if m.top1_untied is None else f" ({m.top1_untied:.3f} where dense itself is not tied)"
    return (f"top-1 agreement with dense {m.top1:.3f}{untied}, its greedy text left dense's on {m.departed} of "
            f"{m.prompts} prompts within {m.tokens} tokens")


def faithfulness_line(pair_name: str, names) -> str:
    """One sentence for the dropdown's help: each measured kernel's (and engine's) agreement on this pair."""
    measured = [(name, MEASURED[pair_name, name]) for name in names if (pair_name, name) in MEASURED]
    if not measured:
        return ""
    parts = ", ".join(f"{name} {m.top1:.3f}" + ("" if m.top1_untied is None else f" ({m.top1_untied:.3f})")
                      for name, m in measured)
    untied = (" (in brackets: over the positions where dense's own best two logits are not tied, so that which "
              "token dense printed was not a matter of rounding)") if any(m.top1_untied is not None for _, m in measured) else ""
    kl = ", ".join(f"{name} {m.kl:.5f}" if m.kl is not None else f"{name} at least {m.kl_top:.5f}"
                   for name, m in measured if m.kl is not None or m.kl_top is not None)
    kl = "" if not kl else (" KL divergence from dense along the same text, in nats (how far the whole next-token "
                            f"distribution moved, not only its best token): {kl}; a server lists only its most likely "
                            "tokens, so its figure is a lower bound from dense's 20 most likely.")
    return (f"Measured top-1 agreement with dense under teacher forcing on the bench prompts ({pair_name}){untied}: "
            f"{parts} (docs/benchmarks.md).{kl}")
