"""specdec.kernels.machine_defaults: each kind of machine starts on the configuration its recorded
measurement chose, the figure quoted is the one docs/benchmarks.md records, a kind or pair not
measured gets the safe default and says so, and the page and the command line start on them."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_docs_links import HEADING, prose_lines, slug  # tests/ is on sys.path

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
    entry = MEASURED["cpu-avx2"]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in section(entry.measurement.doc).splitlines()
            if line.startswith("| best |")]
    exact = {row[1]: float(row[5]) for row in rows if row[6] == "yes"}
    assert set(exact) == {"bf16", "int8", "q4k"}
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
    assert [getattr(chosen, f) for f in fields] == ["bf16", "bf16", "model", "eager", "fixed"]
    assert chosen.measurement is None and f"not measured on this kind ({kind})" in chosen.line


def test_cuda_starts_compiled_and_says_it_is_not_measured(monkeypatch):
    monkeypatch.setattr(machine, "machine_kind", lambda device: "cuda")
    chosen = defaults_for(torch.device("cpu"))
    assert chosen.runner == "compiled" and chosen.target_kernel == "bf16" and chosen.k_policy == "fixed"
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
    assert (drafter, variant, kernel, adaptive, cost_k) == ("model", "bf16", "bf16", False, False)
    assert "not measured for tiny-random" in note


def test_the_command_line_starts_on_the_defaults(monkeypatch):
    from specdec.cli.args import runner_names, variant_names

    monkeypatch.setattr(machine, "machine_kind", lambda device: "cuda")
    pair = SimpleNamespace(name=MEASURED_PAIR, device=CPU)
    assert runner_names(SimpleNamespace(runner=None), pair) == ["compiled"]
    monkeypatch.setattr(machine, "machine_kind", lambda device: "cpu-avx512_bf16")
    assert variant_names(SimpleNamespace(draft_variant=None), pair) == ["int4"]
    assert runner_names(SimpleNamespace(runner=None), pair) == ["eager"]
