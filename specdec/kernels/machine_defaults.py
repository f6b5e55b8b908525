"""What a run starts on when nothing is named: the fastest exact configuration measured on this kind of
machine (specdec.models.machine.machine_kind), one entry per kind.

An entry sets the target kernel, the draft variant, the drafter, the runner and the K policy, and
carries the measurement that chose it (the command, the figure, the CPU it ran on, where
docs/benchmarks.md records it) with a one-line reason. "Exact" comes first: a configuration
qualifies only where its speculative output was shown equal to plain decoding on the same kernel
(up to that kernel's own ties), and the fastest such one wins. A kind with no measurement gets
SAFE (the dense target, the stock draft, the draft model at a fixed K, eager) and its line says
"not measured on this kind".

Target kernel and draft variant were measured on one pair (MEASURED_PAIR): another pair keeps the
dense target and the stock draft (a variant that helps one pair may hurt another: tiny-random's
random weights lose most of their agreement in int4), and the kind's runner.

This table is the fallback: where a CPU has measured its own candidates (specdec.serving.defaults_here,
at the app's first start or with `python -m specdec defaults`), what was predicted fastest there is
the start; elsewhere (a GPU, or before a measurement) this table's entry is. The app's Advanced
controls (app/advanced.py), `generate`'s and `bench`'s defaults (specdec/cli/args.py) and the start-up
preload (specdec/serving/startup.py) read both through defaults_here.start_defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specdec.models import machine

MEASURED_PAIR = "qwen2.5-coder-1.5b/0.5b"  # the embedded pair: every entry below was measured on it
DOCS = "docs/benchmarks.md"


@dataclass(frozen=True)
class Measurement:
    """The run that chose an entry, as docs/benchmarks.md records it."""

    command: str  # as it was run (`bf16`: the dense kernel's old name, still accepted)
    figure: str
    cpu: str
    doc: str  # DOCS + its anchor


@dataclass(frozen=True)
class MachineDefaults:
    target_kernel: str
    draft_variant: str
    drafter: str  # model | lookup | auto | auto_head | auto_both (specdec.core.config.DRAFTERS)
    runner: str  # eager | static | compiled
    k_policy: str  # fixed | adaptive | cost
    reason: str  # one line: why this configuration, and what was left out
    measurement: Measurement | None = None  # None: not measured on this kind

    @property
    def line(self) -> str:
        """What the page says it started on, and why (plain text: the page escapes it)."""
        chosen = (f"target {self.target_kernel}, draft {self.draft_variant}, drafter {self.drafter}, "
                  f"{self.runner} runner, K policy {self.k_policy}")
        where = f" ({self.measurement.doc})" if self.measurement is not None else ""
        return f"Started on {chosen}: {self.reason}{where}."


# One draft model at a fixed K, eager: what every pair and device can run, with nothing built or
# measured first (the cost K policy needs a cost table, a minute or more on a large pair).
SAFE = MachineDefaults("dense", "dense", "model", "eager", "fixed", "the safe start, which every pair and device runs")

# `best` in the bench (specdec.bench.policies.best_config) is the auto drafter with the cost K policy; the
# page runs the same drafter and policy (with its own k_max, and no confidence stop).
MEASURED: dict[str, MachineDefaults] = {
    "cpu-avx512_bf16": MachineDefaults(
        "w4a8", "w4a8-v16k", "auto_head", "eager", "cost",
        "the fastest exact configuration measured on this kind: the trained head, with prompt lookup where it matches, "
        "on the w4a8 target, which is batch-invariant like w8a8, so its speculative output equals plain decoding bit for "
        "bit (1.61x llama.cpp's plain decoding). The draft model's best ran 1.09x w4a8 plain; the int4 draft chosen "
        "before costs 0.68 of a w4a8 step there. Eager, as compiling pays back only after minutes per process",
        Measurement("python -m specdec bench --prompts assets/heldout_prompts.json --drafter head --target-kernel w4a8,w8a8 "
                    "--modes plain,page,best,best_head,llamacpp_plain --max-new-tokens 64 --repeats 2",
                    "`best_head` on w4a8 21.36 tok/s, 1.43x w4a8 plain (geomean of 6 held-out prompts), equal to plain "
                    "bit for bit on 6 of 6",
                    "2-core Intel Xeon, AVX-512 BF16, VNNI, AMX",
                    f"{DOCS}#weights-prefetched-into-l2")),
    "cpu-avx2": MachineDefaults(
        "int8", "dense", "auto", "eager", "cost",
        "the fastest exact configuration measured on this kind (the bench's best mode on int8, 2.00 tok/s; dense 1.79, "
        "q4k 1.92). Drafting pays little on this CPU, so K comes from its pass costs (0 where drafting would "
        "not pay). w8a8 is left out: it departed from plain away from ties there before it was made batch-invariant, "
        "and its speed on AVX2 has not been measured since",
        Measurement("python -m specdec bench --prompts PROMPTS --target-kernel bf16,int8,q4k "
                    "--modes plain,spec,best,llamacpp_spec --max-new-tokens 32",
                    "`best` on int8 2.00 tok/s, dense 1.79, q4k 1.92 (3 prompts, one round), each equal to its plain",
                    "2-core AMD EPYC, AVX2 only",
                    f"{DOCS}#one-run-three-target-kernels-and-llamacpp-beside-ours-avx2-machine")),
    # A GPU: no run measured yet. The captured runner, because an eager GPU step waits on the host at
    # least four times and launches every kernel from Python; a failed capture runs static and says so
    # in one line (specdec.core.runners.capture).
    "cuda": replace(SAFE, runner="compiled", reason=(
        "not measured on this kind (cuda): the safe start, on the compiled runner (CUDA graphs; static where a "
        "capture fails), since an eager GPU step waits on the host several times")),
}
# The trained head (drafter "head") is measured in the same run as each entry's `best`, and chosen
# where it wins.


def for_kind(kind: str, pair_name: str = MEASURED_PAIR) -> MachineDefaults:
    """The entry for a kind of machine and a pair (SAFE for a kind not measured)."""
    entry = MEASURED.get(kind)
    if entry is None:
        return replace(SAFE, reason=f"not measured on this kind ({kind}): {SAFE.reason}")
    if pair_name != MEASURED_PAIR and entry.measurement is not None:
        return replace(SAFE, runner=entry.runner, reason=(
            f"not measured for {pair_name} on this kind ({kind}), only {MEASURED_PAIR} was: {SAFE.reason}, "
            f"on this kind's {entry.runner} runner"))
    return entry


def defaults_for(device, pair_name: str = MEASURED_PAIR) -> MachineDefaults:
    return for_kind(machine.machine_kind(device), pair_name)


def default_runner(device) -> str:
    return defaults_for(device).runner


def default_variant(pair_name: str, device) -> str:
    return defaults_for(device, pair_name).draft_variant
