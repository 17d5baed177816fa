"""Benchmark against a baseline: regressions and improvements beyond the noise margin."""

from __future__ import annotations

from dataclasses import dataclass

from stagegate.model import Benchmark, PrecisionResult


@dataclass(frozen=True)
class MetricChange:
    """One metric of one precision, baseline against current."""

    precision: str
    metric: str
    baseline: float
    current: float
    change_pct: float  # positive: the metric grew
    margin_pct: float  # changes within this are noise
    verdict: str  # "regression", "improvement" or "within noise"


@dataclass(frozen=True)
class BaselineComparison:
    comparable: bool
    reason: str  # why not comparable, or what was compared
    baseline_commit: str | None
    baseline_datetime: str
    changes: tuple[MetricChange, ...] = ()

    @property
    def regressions(self) -> tuple[MetricChange, ...]:
        return tuple(c for c in self.changes if c.verdict == "regression")

    @property
    def improvements(self) -> tuple[MetricChange, ...]:
        return tuple(c for c in self.changes if c.verdict == "improvement")


# metric -> (attribute, True when lower is better)
_METRICS = {
    "step_time_ms": ("step_time_ms", True),
    "tokens_per_second": ("tokens_per_second", False),
    "peak_memory_mb": ("peak_mb", True),
}


def _noise_pct(a: PrecisionResult, b: PrecisionResult) -> float:
    """Relative spread of both runs' windows: IQR over median, in percent, added."""
    total = 0.0
    for r in (a, b):
        if r.iqr_ms is not None and r.step_time_ms:
            total += r.iqr_ms / r.step_time_ms * 100
    return total


def compare_to_baseline(
    current: Benchmark, baseline: Benchmark, margin_pct: float
) -> BaselineComparison:
    """Compare every precision both runs measured cleanly; different hardware is not comparable."""
    meta = {"baseline_commit": baseline.commit, "baseline_datetime": baseline.datetime}
    for label, ours, theirs in (
        ("GPU", current.gpu_name, baseline.gpu_name),
        ("torch", current.torch, baseline.torch),
        ("preset", current.preset, baseline.preset),
    ):
        if ours != theirs:
            return BaselineComparison(
                False,
                f"not comparable: {label} differs "
                f"(baseline {theirs or 'none'}, this run {ours or 'none'})",
                **meta,
            )
    changes = []
    for ours in current.precisions:
        theirs = baseline.precision(ours.name)
        if theirs is None or ours.status != "ok" or theirs.status != "ok":
            continue
        for metric, (attr, lower_is_better) in _METRICS.items():
            old, new = getattr(theirs, attr), getattr(ours, attr)
            if not old or new is None:
                continue
            change = (new - old) / old * 100
            margin = max(margin_pct, _noise_pct(ours, theirs)) if attr != "peak_mb" else margin_pct
            worse = change > margin if lower_is_better else change < -margin
            better = change < -margin if lower_is_better else change > margin
            verdict = "regression" if worse else "improvement" if better else "within noise"
            changes.append(MetricChange(ours.name, metric, old, new, change, margin, verdict))
    reason = (
        f"same GPU ({current.gpu_name or 'none'}), torch {current.torch}, preset {current.preset}"
    )
    return BaselineComparison(True, reason, changes=tuple(changes), **meta)
