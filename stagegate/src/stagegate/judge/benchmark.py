"""Benchmark findings: first the evidence (complete, possible, consistent: see ``evidence`` and
``physics``), then failed precisions, per-precision health checks, and each comparison's
metrics, derived from the raw figures (``comparison``), against their targets, with the outcome
of every one (the performance view shows it)."""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median, quantiles
from typing import Any

from stagegate.judge.benchmark_provenance import provenance_findings
from stagegate.judge.benchpolicy import PresetSpec
from stagegate.judge.comparison import METRICS, Row, compare
from stagegate.judge.evidence import Verified, check_evidence, flag
from stagegate.judge.findings import Findings
from stagegate.judge.fp8 import FP8, fp8_evidence
from stagegate.judge.fp8 import target as fp8_target
from stagegate.judge.machine import device_memory_mb
from stagegate.judge.physics import memory_bound, physics
from stagegate.judge.policy import Policy, Threshold, check_threshold
from stagegate.kinds import Kind
from stagegate.model import (
    Benchmark,
    CheckOutcome,
    Comparison,
    Location,
    MetricCheck,
    PrecisionResult,
    StageRecord,
)


def _failed_precision(f: Findings, p: PrecisionResult) -> None:
    fixes = {
        "oom": "reduce the preset's batch size",
        "nonfinite": "find the first non-finite step in the loss curve",
    }
    f.add(
        Kind.BENCHMARK_FAILED,
        f"{p.name}: {p.status}",
        detail=p.error or "",
        fix=fixes.get(p.status, "run the benchmark locally and read the traceback"),
    )


def _memory_checks(f: Findings, p: PrecisionResult, t: Mapping[str, Threshold]) -> None:
    checks = (
        ("memory_growth_mb_per_window", p.memory_growth_mb_per_window, "memory grows"),
        ("live_graph_tensors", p.live_graph_tensors, "tensors keep an autograd graph alive"),
        ("live_tensor_growth_pct_per_window", p.live_growth_pct_per_window, "tensors pile up"),
    )
    for metric, value, what in checks:
        if value is None:
            continue  # samples that are not there are an evidence finding
        reason = check_threshold(t[metric], value)
        if reason:
            f.add(
                Kind.MEMORY_GROWTH,
                f"{p.name}: {what} across windows",
                detail=reason,
                fix="look for tensors kept across steps (histories of losses, graphs)",
            )


def _sync_check(f: Findings, p: PrecisionResult, t: Mapping[str, Threshold]) -> None:
    if p.syncs_per_step is None:
        return  # a count that is not there is an evidence finding
    if p.syncs_measured and check_threshold(t["syncs_per_step"], p.syncs_per_step):
        where = ", ".join(f"{s['location']} x{s['count']}" for s in p.sync_locations[:5])
        f.add(
            Kind.HOST_SYNC,
            f"{p.name}: {p.syncs_per_step:g} host-device syncs per training step",
            detail=where,
            location=Location.parse(p.sync_locations[0]["location"]) if p.sync_locations else None,
            fix="remove .item()/.cpu()/.tolist()/bool(tensor) from the step",
        )


# What each precision's matmuls compute in, and the precision its run must report it used
# (32-tf32 runs 32-true's plan with TF32 matmuls, whose tensors stay float32): the judge's own
# table, never the file's "expected".
RUNS_AS = {
    "32-true": ("float32", "32-true"),
    "32-tf32": ("float32", "32-true"),
    "16-mixed": ("float16", "16-mixed"),
    "16-true": ("float16", "16-true"),
    "bf16-mixed": ("bfloat16", "bf16-mixed"),
    "bf16-true": ("bfloat16", "bf16-true"),
    "fp8": ("bfloat16", "fp8"),  # float8 operands carry the dtype they were cast from, bf16
}


def _precision_used(f: Findings, p: PrecisionResult, runs_as: str) -> None:
    where = f"precisions.{p.name}.precision_used"
    if p.precision_used is None:
        flag(f, Kind.EVIDENCE_MISSING, where, "absent or not text")
    elif p.precision_used != runs_as:
        flag(f, Kind.EVIDENCE_INCONSISTENT, where, f"is {p.precision_used!r}, not {runs_as!r}")


# On CUDA, what torch.set_float32_matmul_precision each fp32 precision must run with: TF32
# ("high") for 32-tf32 alone, so that 32-true, the judged baseline, is IEEE fp32. On a CPU no
# fp32 matmul uses TF32, and the setting is not judged.
FP32_MATMUL = {"32-true": "highest", "32-tf32": "high"}


def _tf32_check(f: Findings, p: PrecisionResult) -> None:
    expected = FP32_MATMUL.get(p.name)
    where = f"precisions.{p.name}.float32_matmul_precision"
    if expected is None:
        return
    if p.float32_matmul_precision is None:
        flag(f, Kind.EVIDENCE_MISSING, where, f"absent; {p.name} runs with {expected!r}")
    elif p.float32_matmul_precision != expected:
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            where,
            f"is {p.float32_matmul_precision[:20]!r}; {p.name} runs with {expected!r}",
        )


def _autocast_check(f: Findings, p: PrecisionResult, spec: PresetSpec) -> None:
    """The precision ran as the one it is named for, and its matmuls computed in its dtype."""
    if p.name not in RUNS_AS:
        why = f"no compute dtype is known for precision {p.name!r}"
        flag(f, Kind.EVIDENCE_UNCHECKED, f"precisions.{p.name}", why, fix="run a known precision")
        return
    expected, runs_as = RUNS_AS[p.name]
    _precision_used(f, p, runs_as)
    if "autocast" not in spec.measures:
        return
    if not p.matmul_dtypes:
        where = f"precisions.{p.name}.health.matmul_dtypes"
        flag(f, Kind.EVIDENCE_MISSING, where, "absent: no matmul of the step was observed")
        return
    if set(p.matmul_dtypes) != {expected}:
        seen = ", ".join(f"{n} in {d}" for d, n in sorted(p.matmul_dtypes.items()))
        f.add(
            Kind.AUTOCAST_MISMATCH,
            f"{p.name}: matmuls do not compute in {expected}",
            detail=f"matrix multiplies of one training step: {seen}",
            fix="check that the forward runs inside the precision's autocast context",
        )


def _spread(values: list[float]) -> float:
    """The interquartile range of ``values`` (0 for fewer than two)."""
    if len(values) < 2:
        return 0.0
    low, _, high = quantiles(values, n=4)
    return high - low


def _learning_check(f: Findings, p: PrecisionResult, t: Mapping[str, Threshold]) -> None:
    """The timed steps train the model: the median loss of their last quarter is below that of
    their first by more than the last quarter's own spread (a flat curve's noise falls half
    the time). A loss that rises, or stays where it began, in every precision alike passes
    every comparison between them; this check is each one's own."""
    losses = [v for v in p.loss_curve if v is not None]
    if not losses or len(losses) < len(p.loss_curve):
        return  # an empty or non-finite curve is an evidence finding
    quarter = max(1, len(losses) // 4)
    first, last = median(losses[:quarter]), median(losses[-quarter:])
    spread = _spread(losses[-quarter:])
    if first - last > spread:
        return
    f.add(
        Kind.NOT_LEARNING,
        f"{p.name}: the training loss went from {first:.4g} to {last:.4g} over the timed steps",
        detail=f"medians of the first and the last {quarter} of {len(losses)} steps' losses; "
        f"a fall must exceed the last quarter's interquartile range, {spread:.4g}",
        fix="check the optimizer step, the learning rate and its schedule, the loss and the "
        "gradient scaling: the same run trained before",
    )


PRECISION_CHECKS = (_memory_checks, _sync_check, _learning_check)


# The precisions the AMP targets (speedup, memory reduction) are for: 16-bit compute. fp32 in
# any mode (32-true, 32-tf32: TF32 is how fp32 matmuls run, its tensors stay fp32) is held to
# accuracy parity only.
REDUCED_PRECISION_PREFIXES = ("16-", "bf16-")
# Speed and CUDA memory mean something only on the GPU; accuracy parity is measured anywhere.
GPU_TARGETS = ("speedup", "peak_memory_reduction_pct", "activation_memory_reduction_pct")


def _values(c: Comparison) -> dict[str, float | None]:
    return {
        "speedup": c.speedup,
        "peak_memory_reduction_pct": c.peak_memory_reduction_pct,
        "activation_memory_reduction_pct": c.activation_memory_reduction_pct,
        "accuracy_diff": c.accuracy_diff,
    }


def _undecided(f: Findings, c: Comparison, metric: str, threshold: Threshold) -> str:
    """Why the speedup's 95% interval cannot decide its target (one bound meets it, the other
    misses), with a finding that blocks; "" when the interval lies on one side."""
    low, high = c.speedup_ci95
    if metric != "speedup" or (check_threshold(threshold, low) is None) == (
        check_threshold(threshold, high) is None
    ):
        return ""
    why = f"the 95% interval {low:.3g}x-{high:.3g}x straddles the target {threshold}"
    f.add(
        Kind.TARGET_UNDECIDED,
        f"{c.precision} vs {c.baseline}: speedup NOT VERIFIED",
        detail=why,
        fix="time more windows, or on a quieter GPU, until the interval clears the target",
    )
    return why


def _judged(c: Comparison, metric: str, key: str, policy: Policy) -> bool:
    """Whether ``metric`` of ``c`` is held to the threshold ``key``: the AMP targets for 16-bit
    precisions against the judged baseline, accuracy for every other precision against it, and
    fp8 to its own targets only, against bf16-mixed."""
    if key != metric or c.precision == FP8:
        return key != metric
    amp = c.precision.startswith(REDUCED_PRECISION_PREFIXES)
    return c.baseline == policy.judged_baseline and (metric not in GPU_TARGETS or amp)


def _check(f: Findings, row: Row, metric: str, policy: Policy, v: Verified) -> MetricCheck:
    """The outcome of one derived metric of one comparison; a miss is a finding. What could
    not be checked is NOT VERIFIED, saying why: beside a blocking evidence finding, or, for the
    GPU targets of a run the policy lets go without a GPU, alone."""
    c = row.comparison
    value = _values(c)[metric]
    key = fp8_target(c, metric) or metric
    threshold = policy.thresholds[key]
    target = str(threshold)
    if metric in row.unverified:
        return MetricCheck(
            c, metric, value, target, CheckOutcome.NOT_VERIFIED, row.unverified[metric]
        )
    if not _judged(c, metric, key, policy):
        return MetricCheck(c, metric, value, target, CheckOutcome.REPORTED)
    if metric in GPU_TARGETS and not v.gpu:
        return MetricCheck(c, metric, value, target, CheckOutcome.NOT_VERIFIED, v.gpu_why)
    why = _undecided(f, c, metric, threshold)
    if why:
        return MetricCheck(c, metric, value, target, CheckOutcome.NOT_VERIFIED, why)
    reason = check_threshold(threshold, value)
    if reason is None:
        return MetricCheck(c, metric, value, target, CheckOutcome.MET)
    f.add(
        Kind.THRESHOLD_MISSED,
        f"{c.precision} vs {c.baseline}: {metric} misses its target",
        detail=reason,
        fix="profile the step; see the memory and sync sections",
    )
    return MetricCheck(c, metric, value, target, CheckOutcome.MISSED, reason)


def _memory_figures(bench: Benchmark) -> list[tuple[str, float | None]]:
    """Each precision's CUDA memory figures, where they are in the file."""
    return [
        (f"precisions.{p.name}.memory.{key}", value)
        for p in bench.precisions
        for key, value in (("peak_allocated_mb", p.peak_mb), ("static_mb", p.static_mb))
    ]


def benchmark_findings(
    f: Findings,
    bench: Benchmark,
    policy: Policy,
    record: StageRecord,
    host: Mapping[str, Any] | None = None,
) -> tuple[MetricCheck, ...]:
    """Findings about the evidence (the file tied to ``record``'s run, and to the GPU job's
    ``host`` facts where given), every precision and comparison; the outcome of every
    comparison metric, derived from the raw figures. ``bench`` comes with its precisions'
    figures derived (:func:`stagegate.judge.derive.figured`): the health checks judge them."""
    provenance_findings(f, bench, record, policy.benchmark.clock_tolerance_s, host)
    verified = check_evidence(f, bench, policy.benchmark, policy.judged_baseline)
    fp8_evidence(f, bench, record)
    physics(f, bench, verified, record.environment.get("cpu_count"), policy.benchmark)
    memory_bound(f, _memory_figures(bench), device_memory_mb(record.environment))
    rows = compare(f, bench, verified, policy)
    for p in bench.precisions:
        if p.status != "ok":
            _failed_precision(f, p)
            continue
        for check in PRECISION_CHECKS:
            check(f, p, policy.thresholds)
        if verified.spec is not None:
            _autocast_check(f, p, verified.spec)
        if verified.gpu:
            _tf32_check(f, p)
    return tuple(_check(f, row, metric, policy, verified) for row in rows for metric in METRICS)
