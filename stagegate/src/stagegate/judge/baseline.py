"""The benchmark against a stored baseline: which baseline, and the regressions and
improvements beyond the noise margin."""

from __future__ import annotations

from collections.abc import Sequence

from stagegate.judge.findings import Findings
from stagegate.kinds import Kind
from stagegate.model import (
    NOT_VERIFIED,
    BaselineComparison,
    Benchmark,
    MetricChange,
    PrecisionResult,
)

# metric -> (attribute, True when lower is better). Throughput is not among them: both runs'
# is derived from the same windows as their step time, so it would count one change twice.
_METRICS = {
    "step_time_ms": ("step_time_ms", True),
    "peak_memory_mb": ("peak_mb", True),
}


def step_mode(benchmark: Benchmark) -> str:
    """How the run executed its training step: ``compiled`` where its settings say
    ``"compile": true``, else ``eager`` (a file from before the setting existed ran eager)."""
    return "compiled" if benchmark.settings.get("compile") is True else "eager"


def _key(b: Benchmark) -> tuple[str | None, str, str]:
    return b.gpu_name, b.preset, step_mode(b)


def pick_baseline(current: Benchmark, baselines: Sequence[Benchmark]) -> Benchmark | None:
    """The baseline measured on the same GPU and preset, with the step run the same way
    (compiled or eager), as ``current``; else one on the same GPU and preset; else the first
    one (the comparison then reports either as not comparable)."""
    same = [b for b in baselines if _key(b) == _key(current)]
    near = [b for b in baselines if _key(b)[:2] == _key(current)[:2]]
    return (same or near or list(baselines) or [None])[0]


def history(baselines: Sequence[Benchmark], runs: int) -> tuple[Benchmark, ...]:
    """The last ``runs`` baselines measured on a GPU, oldest first: the trusted baselines given
    are the only history (a CPU run is no GPU history)."""
    gpu = sorted((b for b in baselines if b.gpu_verified and b.commit), key=lambda b: b.datetime)
    return tuple(gpu[-runs:]) if runs else ()


def _noise_pct(a: PrecisionResult, b: PrecisionResult) -> float:
    """Relative spread of both runs' windows: IQR over median, in percent, added."""
    total = 0.0
    for r in (a, b):
        if r.iqr_ms is not None and r.step_time_ms:
            total += r.iqr_ms / r.step_time_ms * 100
    return total


def _change(
    ours: PrecisionResult, theirs: PrecisionResult, metric: str, margin_pct: float
) -> MetricChange | None:
    """One metric of one precision against the baseline; beyond ``margin_pct`` it is a
    regression (or improvement). Runs whose windows spread more than that could hide one: NOT
    VERIFIED, never "within noise"."""
    attr, lower_is_better = _METRICS[metric]
    old, new = getattr(theirs, attr), getattr(ours, attr)
    if not old or new is None:
        return None
    change = (new - old) / old * 100
    noise = _noise_pct(ours, theirs) if attr != "peak_mb" else 0.0
    if noise > margin_pct:
        return MetricChange(ours.name, metric, old, new, change, noise, NOT_VERIFIED)
    worse = change > margin_pct if lower_is_better else change < -margin_pct
    better = change < -margin_pct if lower_is_better else change > margin_pct
    verdict = "regression" if worse else "improvement" if better else "within noise"
    return MetricChange(ours.name, metric, old, new, change, margin_pct, verdict)


def _changes(current: Benchmark, baseline: Benchmark, margin_pct: float) -> list[MetricChange]:
    changes = []
    for ours in current.precisions:
        theirs = baseline.precision(ours.name)
        if theirs is None or ours.status != "ok" or theirs.status != "ok":
            continue
        for metric in _METRICS:
            change = _change(ours, theirs, metric, margin_pct)
            if change is not None:
                changes.append(change)
    return changes


def compare_to_baseline(
    current: Benchmark, baseline: Benchmark, margin_pct: float
) -> BaselineComparison:
    """Compare every precision both runs measured cleanly; different hardware is not comparable."""
    meta = {"baseline_commit": baseline.commit, "baseline_datetime": baseline.datetime}
    for label, ours, theirs in (
        ("GPU", current.gpu_name, baseline.gpu_name),
        ("torch", current.torch, baseline.torch),
        ("preset", current.preset, baseline.preset),
        ("the step's compilation", step_mode(current), step_mode(baseline)),
    ):
        if ours != theirs:
            return BaselineComparison(
                False,
                f"not comparable: {label} differs "
                f"(baseline {(theirs or 'none')[:80]}, this run {(ours or 'none')[:80]})",
                **meta,
            )
    reason = (
        f"same GPU ({current.gpu_name or 'none'}), torch {current.torch}, preset {current.preset}"
    )
    changes = tuple(_changes(current, baseline, margin_pct))
    return BaselineComparison(True, reason, changes=changes, **meta)


def baseline_findings(f: Findings, cmp: BaselineComparison, required: bool) -> None:
    """A HIGH finding per regression and an INFO one per improvement; where the stage is
    required (not skippable), one that blocks when the comparison could not be made."""
    if required and cmp.not_verified:
        f.add(
            Kind.REGRESSION_UNVERIFIED,
            "regression against the baseline NOT VERIFIED",
            detail=cmp.not_verified[:600],
            fix="store a baseline of this GPU, torch and preset, or measure with less spread "
            "between windows",
        )
    for c in cmp.regressions:
        f.add(
            Kind.REGRESSION,
            f"{c.precision} {c.metric} regressed {c.change_pct:+.1f}% vs baseline",
            detail=f"baseline {c.baseline:.4g}, now {c.current:.4g}, "
            f"noise margin {c.margin_pct:.1f}%",
            fix="bisect the commits since the baseline",
        )
    for c in cmp.improvements:
        f.add(
            Kind.IMPROVEMENT,
            f"{c.precision} {c.metric} improved {c.change_pct:+.1f}% vs baseline",
            detail=f"baseline {c.baseline:.4g}, now {c.current:.4g}",
        )
