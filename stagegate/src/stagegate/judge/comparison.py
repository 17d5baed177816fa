"""Each comparison of a benchmark recomputed from the verified raw figures of its two
precisions: the speedup and its 95% interval from the timed windows, the memory reductions from
the memory figures, the accuracy and loss differences from the validation figures.

The file's own summaries are checked against the recomputation (a disagreement is a finding),
and only the recomputed figures reach a threshold. A figure that could not be recomputed says
why, beside the finding that blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from stagegate.judge.evidence import Verified, check_summary, flag
from stagegate.judge.findings import Findings
from stagegate.judge.policy import Policy
from stagegate.judge.stats import LEVEL, RatioDistribution, ratio_of_medians
from stagegate.kinds import Kind
from stagegate.model import Benchmark, Comparison

METRICS = ("speedup", "peak_memory_reduction_pct", "activation_memory_reduction_pct")
METRICS += ("accuracy_diff",)
# The dtype each precision's matmuls compute in, at best: its peak bounds its speed.
COMPUTE_DTYPE = {
    "32-true": "fp32",
    "32-tf32": "tf32",
    "16-mixed": "fp16",
    "16-true": "fp16",
    "bf16-mixed": "bf16",
    "bf16-true": "bf16",
    "fp8": "fp8",  # its blocks' linear layers; the rest of the step computes in bf16
}
DIFF_SCALE = 1e-4  # accuracy and loss differences: the tolerance is a share of this, or more


def _at(where: str, metric: str, c: Comparison) -> str:
    """The field of a comparison, named with what it compares."""
    return f"{where}.{metric} of {c.precision} vs {c.baseline}"


@dataclass
class Row:
    """One comparison as the judge recomputed it, and why any metric could not be."""

    comparison: Comparison
    unverified: dict[str, str] = field(default_factory=dict)  # metric -> why


def _ceiling(f: Findings, where: str, name: str, speedup: float, v: Verified) -> str:
    """Why the speedup is not possible on the GPU, or "".

    Each kernel of a step does the same work in either precision: a compute-bound one runs at
    most as much faster as the precision's peak outruns the baseline's arithmetic, a
    memory-bound one at most 2x (half the bytes), so the step can speed up no more than the
    ratio of peaks. The baseline's arithmetic is taken as IEEE fp32 whatever its name: TF32
    mode lets matmuls use tensor cores but leaves attention and other kernels in fp32 (on an
    H100, bf16-mixed ran 2.70x faster than 32-tf32, whose tensor-core peaks differ 2x).
    """
    if v.peaks is None:
        return v.peaks_why
    dtype = COMPUTE_DTYPE.get(name)
    if dtype is None:
        why = f"no compute dtype is known for precision {name!r}"
        flag(f, Kind.EVIDENCE_UNCHECKED, where, why, fix="compare a known precision")
        return why
    if dtype not in v.peaks:
        return f"the GPU has no {dtype} peak"  # physics finds the run impossible
    ceiling = v.peaks[dtype] / v.peaks["fp32"]
    if speedup <= ceiling:
        return ""
    flag(
        f,
        Kind.EVIDENCE_IMPOSSIBLE,
        where,
        f"{speedup:.3g}x from the windows, above the GPU's {dtype}/fp32 peak ratio {ceiling:.3g}x",
        detail="the peak ratio is from the policy's peak_tflops table",
    )
    return f"above the GPU's peak ratio ({ceiling:.3g}x)"


def check_interval(
    f: Findings, where: str, claimed: tuple[float, float], dist: RatioDistribution, tol: float
) -> None:
    """Each bound of the file's interval lies where the windows' bootstrap puts it: within
    ``tol`` of the 2.5th (97.5th) percentile of the exact distribution."""
    if any(math.isnan(x) for x in claimed):
        flag(f, Kind.EVIDENCE_MISSING, where, "absent or not two finite numbers")
        return
    tails = ((1 - LEVEL) / 2, (1 + LEVEL) / 2)
    spans = [(dist.share_below(x, False), dist.share_below(x, True)) for x in claimed]
    if all(
        below <= share + tol and upto >= share - tol
        for (below, upto), share in zip(spans, tails, strict=True)
    ):
        return
    ours = dist.interval()
    flag(
        f,
        Kind.EVIDENCE_INCONSISTENT,
        where,
        f"says {claimed[0]:.4g}-{claimed[1]:.4g}, the windows give {ours[0]:.4g}-{ours[1]:.4g}",
        detail=f"the file's bounds lie at the {(spans[0][0] + spans[0][1]) * 50:.1f}th and "
        f"{(spans[1][0] + spans[1][1]) * 50:.1f}th percentiles of the windows' bootstrap "
        f"distribution; each may stray {tol:g} from the 2.5th and 97.5th",
    )


def _speed(f: Findings, where: str, c: Comparison, v: Verified, policy: Policy, row: Row) -> None:
    top, bottom = v.windows.get(c.baseline), v.windows.get(c.precision)
    bp = policy.benchmark
    if top is None or bottom is None:
        row.unverified["speedup"] = (
            f"the windows of {c.baseline if top is None else c.precision} were not verified"
        )
        return
    speedup, dist = ratio_of_medians(top, bottom), RatioDistribution(top, bottom)
    claimed = None if math.isnan(c.speedup) else c.speedup
    check_summary(f, _at(where, "speedup", c), claimed, speedup, bp.summary_tolerance_pct)
    check_interval(f, _at(where, "speedup_ci95", c), c.speedup_ci95, dist, bp.interval_tolerance)
    row.comparison = replace(row.comparison, speedup=speedup, speedup_ci95=dist.interval())
    why = _ceiling(f, _at(where, "speedup", c), c.precision, speedup, v) if v.gpu else ""
    if why:
        row.unverified["speedup"] = why


def _memory(f: Findings, where: str, c: Comparison, v: Verified, policy: Policy, row: Row) -> None:
    measured = v.spec is not None and "memory" in v.spec.measures
    ours, base = v.memory.get(c.precision), v.memory.get(c.baseline)
    for i, metric in enumerate(("peak_memory_reduction_pct", "activation_memory_reduction_pct")):
        claimed = getattr(c, metric)
        if claimed is not None and claimed >= 100:
            flag(
                f, Kind.EVIDENCE_IMPOSSIBLE, _at(where, metric, c), f"{claimed:g}%: nothing is left"
            )
        if not measured:
            if claimed is not None:
                flag(
                    f,
                    Kind.EVIDENCE_INCONSISTENT,
                    _at(where, metric, c),
                    "the preset measures no memory",
                )
            continue
        if ours is None or base is None:
            unverified = c.baseline if base is None else c.precision
            row.unverified[metric] = f"the memory of {unverified} was not verified"
            continue
        value = (1 - ours[i] / base[i]) * 100
        if claimed is None or claimed < 100:
            check_summary(
                f,
                _at(where, metric, c),
                claimed,
                value,
                policy.benchmark.summary_tolerance_pct,
                1.0,
            )
        row.comparison = replace(row.comparison, **{metric: value})


def _accuracy(
    f: Findings, where: str, c: Comparison, v: Verified, policy: Policy, row: Row
) -> None:
    ours, base = v.accuracy.get(c.precision), v.accuracy.get(c.baseline)
    if ours is None or base is None:
        missing = c.baseline if base is None else c.precision
        row.unverified["accuracy_diff"] = f"the validation figures of {missing} were not verified"
        return
    diffs = {"accuracy_diff": abs(ours[0] - base[0]), "val_loss_diff": ours[1] - base[1]}
    tol = policy.benchmark.summary_tolerance_pct
    for metric, value in diffs.items():
        check_summary(f, _at(where, metric, c), getattr(c, metric), value, tol, DIFF_SCALE)
    row.comparison = replace(row.comparison, **diffs)


RECOMPUTE = (_speed, _memory, _accuracy)


def _blank(c: Comparison) -> Comparison:
    """``c`` with no figure: each is set only once it is recomputed."""
    return Comparison(c.precision, c.baseline, math.nan, (math.nan, math.nan), *[None] * 4)


def _sides(f: Findings, where: str, c: Comparison, bench: Benchmark) -> str:
    """Why one side of ``c`` cannot be compared, or "" (the producer compares clean runs only)."""
    for side, name in (("baseline", c.baseline), ("precision", c.precision)):
        p = bench.precision(name)
        if p is None or p.status != "ok":
            problem = "is not among the precisions" if p is None else f"has status {p.status!r}"
            flag(f, Kind.EVIDENCE_IMPOSSIBLE, f"{where}.{side}", f"{name!r} {problem}")
            return f"{name} {problem}"
    return ""


def recompute(f: Findings, bench: Benchmark, v: Verified, policy: Policy) -> list[Row]:
    """Every comparison the file holds, recomputed, then one row per required comparison the
    file lacks (each metric unverified)."""
    rows: list[Row] = []
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(bench.comparisons):
        where = f"comparisons[{i}]"
        if (c.precision, c.baseline) in seen:
            flag(f, Kind.EVIDENCE_INCONSISTENT, where, f"repeats {c.precision} vs {c.baseline}")
        seen.add((c.precision, c.baseline))
        row = Row(_blank(c))
        why = _sides(f, where, c, bench)
        if why:
            row.unverified = dict.fromkeys(METRICS, why)
        else:
            for step in RECOMPUTE:
                step(f, where, c, v, policy, row)
        rows.append(row)
    return rows + _absent(f, bench, v, policy, seen)


def _absent(
    f: Findings, bench: Benchmark, v: Verified, policy: Policy, seen: set[tuple[str, str]]
) -> list[Row]:
    base = policy.judged_baseline
    rows = []
    for name in v.spec.precisions if v.spec else ():
        ran = [bench.precision(n) for n in (name, base)]
        if name == base or (name, base) in seen or any(p is None or p.status != "ok" for p in ran):
            continue  # an absent or failed precision is a finding of its own
        flag(f, Kind.EVIDENCE_MISSING, "comparisons", f"no {name} vs {base}")
        blank = Comparison(name, base, math.nan, (math.nan, math.nan), *[None] * 4)
        rows.append(Row(blank, dict.fromkeys(METRICS, "absent from the benchmark file")))
    return rows
