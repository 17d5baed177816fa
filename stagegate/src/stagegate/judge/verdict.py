"""Scores and the decision: each stage's deductions, and BLOCK or PASS over all stages."""

from __future__ import annotations

from collections.abc import Sequence

from stagegate.judge.findings import Findings
from stagegate.model import (
    ABCheck,
    BaselineComparison,
    Benchmark,
    Decision,
    Deduction,
    MetricCheck,
    StageData,
    StageStatus,
    StageVerdict,
    Verdict,
)

# The limits a stage report states beside the figures they bound (the memory table's)
SHOWN_LIMITS = (
    "memory_growth_mb_per_window",
    "live_tensor_growth_pct_per_window",
    "live_graph_tensors",
)


def stage_verdict(
    name: str,
    status: StageStatus,
    f: Findings,
    data: StageData,
    *,
    note: str = "",
    checks: tuple[MetricCheck, ...] = (),
    baseline: BaselineComparison | None = None,
    ab: tuple[ABCheck, ...] = (),
    history: tuple[Benchmark, ...] = (),
) -> StageVerdict:
    """A stage's verdict: its findings most severe first, the points each costs, its score."""
    policy = f.policy
    findings = tuple(sorted(f.items, key=lambda x: x.severity.rank))
    deductions = tuple(
        Deduction(x.severity, policy.deduction[x.severity], x.title)
        for x in findings
        if policy.deduction[x.severity]
    )
    declared = list(policy.stages)
    return StageVerdict(
        name=name,
        title=policy.title(name),
        number=declared.index(name) + 1 if name in declared else len(declared) + 1,
        limits={k: str(t) for k, t in policy.thresholds.items() if k in SHOWN_LIMITS},
        status=status,
        required=name in policy.required,
        skippable=policy.skippable.get(name) == "no-cuda",
        score=max(0, 100 - sum(d.points for d in deductions)),
        findings=findings,
        blocking=tuple(x for x in findings if x.severity.blocks),
        deductions=deductions,
        data=data,
        checks=checks,
        baseline=baseline,
        ab=ab,
        history=history,
        note=note,
    )


def _reasons(stages: Sequence[StageVerdict]) -> list[str]:
    reasons: list[str] = []
    for s in stages:
        if s.required and s.status not in (StageStatus.PASS, StageStatus.NOT_VERIFIED):
            reasons.append(f"required stage {s.name} is {s.status.value}")
        elif not s.required and s.status in (StageStatus.FAIL, StageStatus.ERROR):
            reasons.append(f"stage {s.name} is {s.status.value}")
    for s in stages:
        reasons += [f"{x.severity.value} in {s.name}: {x.title}" for x in s.blocking]
    if not any(s.data.record is not None for s in stages):
        reasons.append("nothing was verified: no stage judged here ran")  # --only, all unrun
    return reasons


def decide(stages: Sequence[StageVerdict]) -> Verdict:
    """BLOCK on any CRITICAL or HIGH finding, any required stage that failed, errored or is
    missing, or no stage judged that ran; otherwise PASS. NOT VERIFIED is only ever given to a
    stage the policy lets skip."""
    reasons = _reasons(stages)
    fixes = dict.fromkeys(f"{x.title}: {x.fix}" for s in stages for x in s.blocking if x.fix)
    total = sum(d.points for s in stages for d in s.deductions)
    return Verdict(
        Decision.BLOCK if reasons else Decision.PASS,
        max(0, 100 - total),
        tuple(stages),
        tuple(dict.fromkeys(reasons)),
        tuple(fixes),
    )
