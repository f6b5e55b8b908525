"""specdec.kernels.machine_defaults: each kind of machine starts on the configuration its recorded
measurement chose, the figure quoted is the one docs/benchmarks.md records, a kind or pair not
measured gets the safe default and says so, and the page and the command line start on them."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tests.support.docs import HEADING, prose_lines, slug

from specdec.core.config import DRAFTERS, GenerationConfig
from specdec.kernels import device_offer, machine_defaults
from specdec.kernels.machine_defaults import MEASURED, MEASURED_PAIR, SAFE, default_runner, default_variant, defaults_for
from specdec.models import machine

ROOT = Path(__file__).resolve().parent.parent
CPU = torch.device("cpu")


def section(doc: str) -> str:
    """The text of the docs section an entry links to, from its heading to the next of its level or higher."""
    file, _, anchor = doc.partition("#")
    lines, level = [], None
    for _, line in prose_lines(ROOT / file):
        match = HEADING.match(line)
        if match and level is not None and len(match.group(1)) <= level:
            break
        if match and level is None and slug(match.group(2)) == anchor:
            level = len(match.group(1))
        if level is not None:
            lines.append(line)
    assert lines, f"no heading #{anchor} in {file}"
    return "\n".join(lines)


@pytest.fixture(autouse=True)
def nothing_measured_here(monkeypatch, tmp_path):
    """An empty cache: no choice measured on this machine, so every default is the recorded table's."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))


@pytest.mark.parametrize("kind", sorted(MEASURED))
def test_each_kind_starts_on_its_entry(monkeypatch, kind):
    monkeypatch.setattr(machine, "machine_kind", lambda device: kind)
    chosen = defaults_for(CPU)
    assert chosen == MEASURED[kind]
    assert default_runner(CPU) == chosen.runner and default_variant(MEASURED_PAIR, CPU) == chosen.draft_variant
    GenerationConfig(drafter=chosen.drafter, draft_variant=chosen.draft_variant, target_kernel=chosen.target_kernel,
                     runner=chosen.runner, k_policy=chosen.k_policy).validate()  # names the engine accepts
    assert chosen.drafter in DRAFTERS and chosen.drafter != "none"  # the page shows speculation
    device = SimpleNamespace(type="cuda" if kind == "cuda" else "cpu")  # the page's dropdowns list these
    assert chosen.target_kernel in device_offer.target_kernels(device).names
    assert chosen.draft_variant in device_offer.draft_variants(device).names
    assert chosen.line.startswith(f"Started on target {chosen.target_kernel}, draft {chosen.draft_variant}, ")


@pytest.mark.parametrize("kind", [k for k in sorted(MEASURED) if MEASURED[k].measurement is not None])
def test_a_measured_entry_quotes_the_run_docs_record(kind):
    """Every figure an entry quotes is in the section it links to, and so is its command."""
    measurement = MEASURED[kind].measurement
    text, whole = section(measurement.doc), (ROOT / machine_defaults.DOCS).read_text(encoding="utf-8")
    for figure in re.findall(r"\d+\.\d+x?", measurement.figure):
        assert figure in text, f"{kind}: {figure} is not in {measurement.doc}"
    for figure in re.findall(r"\d+\.\d+x?", MEASURED[kind].reason):  # the reason may compare with other runs
        assert figure in whole, f"{kind}: {figure} is not in {machine_defaults.DOCS}"
    options = re.findall(r"--[a-z-]+ [^ -]+", measurement.command)
    commands = " ".join(whole.replace("\\\n", " ").split())  # commands in code blocks run over lines
    assert options and all(option in commands for option in options if "PROMPTS" not in option)


def test_avx2_chooses_the_fastest_exact_best_row_of_its_run():
    """In the AVX2 run every kernel's `best` was equal to its plain; the default is the fastest of them."""
    from specdec.core.variant_names import canonical

    entry = MEASURED["cpu-avx2"]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in section(entry.measurement.doc).splitlines()
            if line.startswith("| best |")]
    exact = {canonical(row[1]): float(row[5]) for row in rows if row[6] == "yes"}  # the run named dense bf16
    assert set(exact) == {"dense", "int8", "q4k"}
    assert max(exact, key=exact.get) == entry.target_kernel == "int8"


def test_a_kind_starts_on_w8a8_only_where_it_is_batch_invariant_and_shown_bit_for_bit():
    """w8a8's speculative output once departed from its plain output away from ties (its pass was not
    batch-invariant). A kind starts on it only as a batch-invariant kernel, with the run that showed its
    output equal to plain bit for bit; a kind that passes it over says why."""
    from specdec.kernels.batch_invariant import INVARIANT

    for kind, entry in MEASURED.items():
        if entry.target_kernel == "w8a8":
            assert INVARIANT["w8a8"] is None and "bit for bit" in entry.measurement.figure, kind
        elif entry.measurement is not None:
            assert "w8a8" in entry.reason, kind


@pytest.mark.parametrize("kind", ["cpu", "mps", "xpu"])
def test_an_unknown_kind_gets_the_safe_default_and_says_so(monkeypatch, kind):
    monkeypatch.setattr(machine, "machine_kind", lambda device: kind)
    chosen = defaults_for(CPU)
    fields = ("target_kernel", "draft_variant", "drafter", "runner", "k_policy")
    assert [getattr(chosen, f) for f in fields] == ["dense", "dense", "model", "eager", "fixed"]
    assert chosen.measurement is None and f"not measured on this kind ({kind})" in chosen.line


def test_cuda_starts_compiled_and_says_it_is_not_measured(monkeypatch):
    monkeypatch.setattr(machine, "machine_kind", lambda device: "cuda")
    chosen = defaults_for(torch.device("cpu"))
    assert chosen.runner == "compiled" and chosen.target_kernel == "dense" and chosen.k_policy == "fixed"
    assert "not measured on this kind (cuda)" in chosen.line and "static where a capture fails" in chosen.line


def test_another_pair_keeps_the_dense_target_and_stock_draft(monkeypatch):
    monkeypatch.setattr(machine, "machine_kind", lambda device: "cpu-avx2")
    chosen = defaults_for(CPU, "tiny-random")
    assert (chosen.target_kernel, chosen.draft_variant, chosen.k_policy) == (SAFE.target_kernel, SAFE.draft_variant, "fixed")
    assert chosen.runner == MEASURED["cpu-avx2"].runner
    assert "not measured for tiny-random on this kind (cpu-avx2)" in chosen.line


@pytest.mark.parametrize("bf16, flags, kind", [
    (True, ("avx2", "avx512_bf16"), "cpu-avx512_bf16"),
    (False, ("fma", "avx2"), "cpu-avx2"),
    (False, ("neon",), "cpu"),
    (False, (), "cpu"),
])
def test_machine_kind_of_a_cpu(monkeypatch, bf16, flags, kind):
    monkeypatch.setattr(machine, "native_bf16", lambda: bf16)
    monkeypatch.setattr(machine, "cpu_flags", lambda: flags)
    assert machine.machine_kind(CPU) == kind


def test_the_page_starts_on_the_defaults_and_escapes_its_line(monkeypatch):
    from app import advanced

    monkeypatch.setitem(MEASURED, "test-kind", machine_defaults.MachineDefaults(
        "int8", "int4", "auto", "static", "cost", "a <b>reason</b> & more",
        machine_defaults.Measurement("bench", "1.0x", "a CPU", "docs/benchmarks.md#x")))
    monkeypatch.setattr(machine, "machine_kind", lambda device: "test-kind")
    values = advanced.defaults(MEASURED_PAIR, CPU)
    assert (values.target_kernel, values.draft_variant, values.drafter, values.runner) == ("int8", "int4", "auto", "static")
    assert values.cost_k and not values.adaptive
    line = advanced.defaults_line(MEASURED_PAIR, CPU)
    assert "a &lt;b&gt;reason&lt;/b&gt; &amp; more" in line and "<b>" not in line
    drafter, variant, kernel, adaptive, cost_k, note = advanced.pair_defaults("tiny-random", CPU)  # not measured
    assert (drafter, variant, kernel, adaptive, cost_k) == ("model", "dense", "dense", False, False)
    assert "not measured for tiny-random" in note


def test_the_command_line_starts_on_the_defaults(monkeypatch):
    from specdec.cli.args import runner_names, variant_names

    monkeypatch.setattr(machine, "machine_kind", lambda device: "cuda")
    pair = SimpleNamespace(name=MEASURED_PAIR, device=CPU)
    assert runner_names(SimpleNamespace(runner=None), pair) == ["compiled"]
    monkeypatch.setattr(machine, "machine_kind", lambda device: "cpu-avx512_bf16")
    assert variant_names(SimpleNamespace(draft_variant=None), pair) == [MEASURED["cpu-avx512_bf16"].draft_variant]
    assert runner_names(SimpleNamespace(runner=None), pair) == ["eager"]


def test_generate_bench_and_the_page_start_on_the_same_defaults(monkeypatch):
    """What generate's and bench's options leave out is the page's start: one entry of the table."""
    import argparse

    from app import advanced
    from specdec.cli.args import START, generation_config, kernel_names, runner_names, variant_names
    from specdec.cli.bench import add_bench_command_args
    from specdec.cli.generate import add_generate_command
    from specdec.kernels import w8a8_build

    monkeypatch.setattr(w8a8_build, "unavailable_reason", lambda device=None: None)  # a CPU the w8a8 kernel runs on
    monkeypatch.setattr(machine, "machine_kind", lambda device: "cpu-avx512_bf16")
    pair, chosen = SimpleNamespace(name=MEASURED_PAIR, device=CPU), defaults_for(CPU)
    assert chosen.target_kernel != SAFE.target_kernel and chosen.k_policy != START.k_policy  # a start of its own, not the safe one
    commands = argparse.ArgumentParser().add_subparsers()
    add_generate_command(commands)
    generate = generation_config(commands.choices["generate"].parse_args(["--prompt", "x"]), pair)
    assert (generate.target_kernel, generate.draft_variant, generate.drafter, generate.runner, generate.k_policy) == (
        chosen.target_kernel, chosen.draft_variant, chosen.drafter, chosen.runner, chosen.k_policy)
    page = advanced.defaults(MEASURED_PAIR, CPU)
    assert (page.target_kernel, page.draft_variant, page.drafter, page.runner) == (
        generate.target_kernel, generate.draft_variant, generate.drafter, generate.runner)
    assert page.cost_k == (generate.k_policy == "cost") and page.adaptive == (generate.k_policy == "adaptive")
    bench = argparse.ArgumentParser()
    add_bench_command_args(bench)
    args = bench.parse_args([])
    assert (kernel_names(args, pair), variant_names(args, pair), runner_names(args, pair)) == (
        [generate.target_kernel], [generate.draft_variant], [generate.runner])
    assert args.k == generate.k == START.k
