"""Each comparison of a benchmark, derived from the verified raw figures of its two precisions:
the speedup and its 95% interval from the timed windows, the memory reductions from the memory
figures, the accuracy and loss differences from the validation figures. Which precisions are
compared is the judge's choice (:func:`stagegate.judge.derive.pairs`), never the file's.

A speedup above what the GPU's peaks allow is impossible. A figure that could not be derived
says why, beside the finding that blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from stagegate.judge.derive import COMPUTE_DTYPE, differences, pairs, reduction_pct, speedup
from stagegate.judge.evidence import Verified, flag
from stagegate.judge.findings import Findings
from stagegate.judge.policy import Policy
from stagegate.kinds import Kind
from stagegate.model import Benchmark, Comparison

METRICS = ("speedup", "peak_memory_reduction_pct", "activation_memory_reduction_pct")
METRICS += ("accuracy_diff",)


def _at(metric: str, c: Comparison) -> str:
    """A metric of a comparison, named with what it compares."""
    return f"{metric} of {c.precision} vs {c.baseline}"


@dataclass
class Row:
    """One comparison as the judge derived it, and why any metric could not be."""

    comparison: Comparison
    unverified: dict[str, str] = field(default_factory=dict)  # metric -> why


def _ceiling(f: Findings, where: str, c: Comparison, speedup: float, v: Verified) -> str:
    """Why the speedup of ``c`` is not possible on the GPU, or "".

    Each kernel of a step does the same work in either precision: a compute-bound one runs at
    most as much faster as the precision's peak outruns the baseline's arithmetic, a
    memory-bound one at most 2x (half the bytes), so the step can speed up no more than the
    larger of the two. A baseline in fp32 or TF32 is taken as IEEE fp32: TF32 mode lets
    matmuls use tensor cores but leaves attention and other kernels in fp32 (on an H100,
    bf16-mixed ran 2.70x faster than 32-tf32, whose tensor-core peaks differ 2x). Against a
    bf16 baseline (fp8 against bf16-mixed) the ratio is to the bf16 peak.
    """
    if v.peaks is None:
        return v.peaks_why
    dtype, base = COMPUTE_DTYPE.get(c.precision), COMPUTE_DTYPE.get(c.baseline)
    if dtype is None or base is None:
        unknown = c.precision if dtype is None else c.baseline
        why = f"no compute dtype is known for precision {unknown!r}"
        flag(f, Kind.EVIDENCE_UNCHECKED, where, why, fix="compare a known precision")
        return why
    base = "fp32" if base in ("fp32", "tf32") else base
    if dtype not in v.peaks or base not in v.peaks:
        return f"the GPU has no {dtype} or {base} peak"  # physics finds the run impossible
    ceiling = max(v.peaks[dtype] / v.peaks[base], 2.0)
    if speedup <= ceiling:
        return ""
    flag(
        f,
        Kind.EVIDENCE_IMPOSSIBLE,
        where,
        f"{speedup:.3g}x from the windows, above the GPU's {dtype}/{base} peak ratio "
        f"{ceiling:.3g}x",
        detail="the peak ratio is from the policy's peak_tflops table; a memory-bound kernel "
        "gains at most 2x",
    )
    return f"above the GPU's peak ratio ({ceiling:.3g}x)"


def _speed(f: Findings, c: Comparison, v: Verified, row: Row) -> None:
    top, bottom = v.windows.get(c.baseline), v.windows.get(c.precision)
    if top is None or bottom is None:
        row.unverified["speedup"] = (
            f"the windows of {c.baseline if top is None else c.precision} were not verified"
        )
        return
    ratio, interval = speedup(top, bottom)
    row.comparison = replace(row.comparison, speedup=ratio, speedup_ci95=interval)
    why = _ceiling(f, _at("speedup", c), c, ratio, v) if v.gpu else ""
    if why:
        row.unverified["speedup"] = why


def _memory(f: Findings, c: Comparison, v: Verified, row: Row) -> None:
    if v.spec is None or "memory" not in v.spec.measures:
        return  # the preset measures no memory: the figures stay blank
    ours, base = v.memory.get(c.precision), v.memory.get(c.baseline)
    for i, metric in enumerate(("peak_memory_reduction_pct", "activation_memory_reduction_pct")):
        if ours is None or base is None:
            unverified = c.baseline if base is None else c.precision
            row.unverified[metric] = f"the memory of {unverified} was not verified"
            continue
        row.comparison = replace(row.comparison, **{metric: reduction_pct(ours[i], base[i])})


def _accuracy(f: Findings, c: Comparison, v: Verified, row: Row) -> None:
    ours, base = v.accuracy.get(c.precision), v.accuracy.get(c.baseline)
    if ours is None or base is None:
        missing = c.baseline if base is None else c.precision
        row.unverified["accuracy_diff"] = f"the validation figures of {missing} were not verified"
        return
    row.comparison = replace(row.comparison, **differences(ours, base))


DERIVE = (_speed, _memory, _accuracy)


def compare(f: Findings, bench: Benchmark, v: Verified, policy: Policy) -> list[Row]:
    """Every comparison the judge makes among the precisions that ran cleanly, derived from
    their verified figures (a failed or absent precision is a finding of its own)."""
    ran = [p.name for p in bench.precisions if p.status == "ok"]
    rows = []
    for name, baseline in pairs(ran, policy.judged_baseline):
        row = Row(Comparison(name, baseline, math.nan, (math.nan, math.nan), *[None] * 4))
        for step in DERIVE:
            step(f, row.comparison, v, row)
        rows.append(row)
    return rows
