"""A whole run, optionally side by side with plain decoding: what the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .compare import Difference, first_difference
from .config import GenerationConfig
from .engine import generate
from .metrics import RunMetrics, summarize
from .models import ModelPair


@dataclass
class RunResult:
    pair: ModelPair
    config: GenerationConfig
    spec_events: list
    spec: RunMetrics
    plain_events: list | None = None
    plain: RunMetrics | None = None
    difference: Difference | None = None

    @property
    def text(self) -> str:
        return "".join(t for e in self.spec_events for t in e.emitted_text)

    @property
    def speedup(self) -> float | None:
        if self.plain is None or not self.plain.tokens_per_s:
            return None
        return self.spec.tokens_per_s / self.plain.tokens_per_s

    def as_json(self) -> dict:
        m = self.spec
        out = {
            "pair": self.pair.name,
            "device": str(self.pair.device),
            "dtype": self.pair.dtype_name,
            "text": self.text,
            "tokens": [t for e in self.spec_events for t in e.emitted],
            "steps": [{"drafted": list(e.drafted), "accepted": e.accepted, "emitted": list(e.emitted), "kind": e.kind} for e in self.spec_events],
            "metrics": {
                "acceptance_rate": m.acceptance_rate,
                "tokens_per_step": m.tokens_per_step,
                "target_passes": m.target_passes,
                "tokens_per_s": m.tokens_per_s,
                "cost_ratio_c": m.cost_ratio_c,
                "predicted_speedup": m.predicted_speedup,
                "mean_k": m.mean_k,
                "finish": self.spec_events[-1].finish if self.spec_events else None,
            },
        }
        if self.plain is not None:
            out["plain"] = {"tokens": [t for e in self.plain_events for t in e.emitted], "tokens_per_s": self.plain.tokens_per_s}
            out["speedup"] = self.speedup
            out["measured_over_predicted"] = self.speedup / m.predicted_speedup if m.predicted_speedup else None
            out["identical_to_plain"] = self.difference is None
            if self.difference is not None:
                out["first_difference"] = self.difference.as_dict()
        return out

    def summary_line(self) -> str:
        m = self.spec
        parts = [
            f"{m.tokens} tokens in {m.target_passes} target passes ({m.tokens_per_step:.2f}/pass)",
            f"acceptance {m.acceptance_rate:.0%}",
            f"{m.tokens_per_s:.1f} tok/s",
            f"c={m.cost_ratio_c:.3f}",
            f"predicted {m.predicted_speedup:.2f}x",
        ]
        if self.plain is not None:
            parts.append(f"plain {self.plain.tokens_per_s:.1f} tok/s, speedup {self.speedup:.2f}x")
            d = self.difference
            if d is None:
                parts.append("identical to plain")
            else:
                cause = "a numerical tie" if d.is_tie else "NOT a tie"
                parts.append(f"differs at token {d.index}: {d.spec_text!r} vs {d.plain_text!r} (top-2 margin {d.margin:.4f}, {cause})")
        return " | ".join(parts)


def compare_runs(pair: ModelPair, prompt: str, config: GenerationConfig, chat=None, with_plain: bool = False) -> RunResult:
    spec_events = list(generate(pair, prompt, config, chat=chat))
    result = RunResult(pair, config, spec_events, summarize(spec_events))
    if with_plain:
        plain_events = list(generate(pair, prompt, replace(config, drafter="none"), chat=chat))
        result.plain_events = plain_events
        result.plain = summarize(plain_events)
        result.difference = first_difference(spec_events, plain_events, pair.dtype_name)
    return result
