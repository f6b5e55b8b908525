"""The lanes of one prompt side by side: the speculative run, plain decoding with the same settings,
and plain decoding on an int4 target (the lossy lane), compared and summed up as `generate` prints
them (a line, or one JSON object). The runs themselves come from specdec.engines.ours.OurSource;
this module only reads their events."""

from __future__ import annotations

from dataclasses import dataclass

from specdec.core.config import GenerationConfig
from specdec.measure.compare import Difference, agreement, first_difference, tie_verdict
from specdec.measure.metrics import RunMetrics, summarize, summarize_runs
from specdec.models.pair import ModelPair


@dataclass
class RunResult:
    pair: ModelPair
    config: GenerationConfig
    spec_events: list
    spec: RunMetrics
    plain_events: list | None = None
    plain: RunMetrics | None = None
    difference: Difference | None = None
    lossy_events: list | None = None  # plain decoding with the int4-quantized target (lossy)
    lossy: RunMetrics | None = None
    lossy_difference: Difference | None = None  # where the lossy output first departs from the exact target's
    lossy_agreement: int | None = None  # how many of the first 64 tokens agree with the exact target's

    @classmethod
    def of(cls, pair: ModelPair, config: GenerationConfig, spec_events: list, plain_events: list | None = None,
           lossy_events: list | None = None, decode_step_s: float | None = None) -> "RunResult":
        """The lanes of one prompt, compared. Costs are in plain decode steps: the plain run's, else
        `decode_step_s` (a one-token target pass timed on the finished run's cache). The lossy lane
        (plain decoding on an int4 target) is judged against the exact plain run, which it needs."""
        result = cls(pair, config, spec_events, summarize_runs(spec_events, plain_events, decode_step_s))
        if plain_events is not None:
            result.plain_events, result.plain = plain_events, summarize(plain_events)
            result.difference = first_difference(spec_events, plain_events, pair.dtype_name, config.target_kernel, pair.device.type)
        if lossy_events is not None:
            if plain_events is None:
                raise ValueError("the lossy lane is judged against plain decoding: run it too")
            result.lossy_events, result.lossy = lossy_events, summarize(lossy_events)
            result.lossy_difference = first_difference(lossy_events, plain_events, pair.dtype_name)
            result.lossy_agreement = agreement(tokens_of(lossy_events), tokens_of(plain_events), 64)
        return result

    @property
    def draft_variant(self) -> str | None:
        return self.config.draft_variant if self.config.uses_draft_model else None

    @property
    def draft_memory_gb(self) -> float | None:
        """Resident memory of the draft as run (its parameters and buffers)."""
        from specdec.kernels.variants import draft_model, resident_gb

        return resident_gb(draft_model(self.pair, self.draft_variant)) if self.draft_variant else None

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
            "draft_variant": self.draft_variant,
            "target_kernel": self.config.target_kernel,
            "runner": self.config.runner,
            "draft_memory_gb": self.draft_memory_gb,
            "text": self.text,
            "tokens": [t for e in self.spec_events for t in e.emitted],
            "steps": [{"drafted": list(e.drafted), "accepted": e.accepted, "emitted": list(e.emitted), "kind": e.kind} for e in self.spec_events],
            "metrics": {
                "alpha": m.alpha,  # per-token acceptance: accepted / (accepted + steps that rejected a draft)
                "accepted_share": m.accepted_share,  # accepted / drafted
                "tokens_per_pass": m.tokens_per_pass,
                "expected_tokens_per_pass": m.expected_tokens_per_pass,
                "target_passes": m.target_passes,
                "tokens_per_s": m.tokens_per_s,
                "cost_ratio_c": m.cost_ratio_c,  # one draft pass / one plain decode step
                "draft_model_c": m.draft_model_c,
                "verify_cost": m.verify_cost,  # one K+1-token target pass / one plain decode step
                "decode_step_s": m.decode_step_s,
                "decode_step_from": m.decode_step_from,
                "predicted_speedup": m.predicted_speedup,
                "predicted_speedup_with_verify_cost": m.predicted_speedup_with_verify_cost,
                "predicted_speedup_from_passes": m.predicted_speedup_from_passes,
                "mean_k": m.mean_k,
                "finish": self.spec_events[-1].finish if self.spec_events else None,
            },
        }
        if self.plain is not None:
            out["plain"] = {"tokens": [t for e in self.plain_events for t in e.emitted], "tokens_per_s": self.plain.tokens_per_s}
            out["speedup"] = self.speedup
            out["measured_over_predicted"] = self.speedup / m.predicted_speedup if m.predicted_speedup else None
            out["measured_over_predicted_from_passes"] = (
                self.speedup / m.predicted_speedup_from_passes if m.predicted_speedup_from_passes else None)
            out["identical_to_plain"] = self.difference is None
            if self.difference is not None:
                out["first_difference"] = self.difference.as_dict()
        if self.lossy is not None:
            d = self.lossy_difference
            out["plain_int4"] = {
                "tokens": [t for e in self.lossy_events for t in e.emitted], "tokens_per_s": self.lossy.tokens_per_s,
                "identical_to_target": d is None, "agree_first_64": self.lossy_agreement,
                "first_difference": None if d is None else {"index": d.index, "lossy_token": d.spec_token, "exact_token": d.plain_token,
                                                            "lossy_text": d.spec_text, "exact_text": d.plain_text},
            }
        return out

    def summary_line(self) -> str:
        m = self.spec
        parts = [
            f"draft {self.draft_variant}" if self.draft_variant else f"drafter {self.config.drafter}",
            f"{self.config.runner} runner",
            f"{m.tokens} tokens in {m.target_passes} target passes ({m.tokens_per_pass:.2f}/pass)",
            f"per-token acceptance alpha {m.alpha:.2f} ({m.accepted_share:.0%} of drafts accepted)",
            f"{m.tokens_per_s:.1f} tok/s",
        ]
        if m.decode_step_s:
            parts.append(f"c={m.cost_ratio_c:.3f}, verify cost {m.verify_cost:.2f} decode steps (decode step from {m.decode_step_from})")
            parts.append(f"predicted {m.predicted_speedup:.2f}x textbook, {m.predicted_speedup_with_verify_cost:.2f}x with verify cost, "
                         f"{m.predicted_speedup_from_passes:.2f}x from passes")
        if self.plain is not None:
            parts.append(f"plain {self.plain.tokens_per_s:.1f} tok/s, speedup {self.speedup:.2f}x")
            d = self.difference
            if d is None:
                parts.append("identical to plain")
            else:
                parts.append(f"differs at token {d.index}: {d.spec_text!r} vs {d.plain_text!r} ({tie_verdict(d)})")
        if self.lossy is not None:
            d = self.lossy_difference
            where = "identical to the exact target" if d is None else (
                f"departs at token {d.index}: {d.spec_text!r} for {d.plain_text!r}, "
                f"{self.lossy_agreement}/{min(64, len(tokens_of(self.plain_events)))} of the first tokens agree")
            parts.append(f"plain int4 target (lossy) {self.lossy.tokens_per_s:.1f} tok/s, {where}")
        return " | ".join(parts)


def tokens_of(events: list) -> list[int]:
    return [t for e in events for t in e.emitted]
