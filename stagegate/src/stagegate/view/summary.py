"""The summary's view model: the decision, every stage's row, the reasons and fixes, and first of
all the gate files the change edits. Every string is built and escaped here."""

from __future__ import annotations

from dataclasses import dataclass

from stagegate.model import Severity, StageStatus, Verdict
from stagegate.view.parts import (
    MAX_ROWS,
    Context,
    Table,
    report_link,
    required_text,
    table,
    tests_line,
)
from stagegate.view.text import code, inline


@dataclass(frozen=True)
class SummaryView:
    decision: str
    score: int
    generated_at: str
    commit: str
    banners: tuple[str, ...]
    stages: Table
    blocking_reasons: tuple[str, ...]
    required_fixes: tuple[str, ...]
    deductions: Table
    flaky: tuple[str, ...] = ()  # "stage: test (N attempts)", one per flaky test
    run_url: str = ""
    gate_files: tuple[str, ...] = ()  # shown first: the change edits the gate's own definition


_STAGE_HEADER = (
    "Stage",
    "Status",
    "Required",
    "Score",
    *(sev.value.title() for sev in Severity),
    "Tests",
    "Duration",
)


def _stage_rows(verdict: Verdict, ctx: Context) -> list[tuple[str, ...]]:
    return [
        (
            report_link(s.name, ctx),
            f"**{s.status.value}**",
            required_text(s),
            str(s.score),
            *(str(s.count(sev)) for sev in Severity),
            inline(tests_line(s)),
            f"{s.data.record.duration_s:.1f} s" if s.data.record else "-",
        )
        for s in verdict.stages
    ]


def _banners(verdict: Verdict) -> tuple[str, ...]:
    """What was not verified, in words a reader cannot miss: skipped stages, baselines
    that could not be compared, stages run on changes their commit does not hold."""
    skipped = [inline(s.note, 400) for s in verdict.stages if s.status is StageStatus.NOT_VERIFIED]
    dirty = [
        inline(s.name, 60)
        for s in verdict.stages
        if s.data.record is not None and s.data.record.uncommitted  # listed, not unknown
    ]
    if dirty:
        skipped.append(
            f"Uncommitted changes: {', '.join(dirty)} ran on a tree with changes the commit "
            "shown does not hold; this report is of that tree, not of the commit alone"
        )
    baselines = [
        f"Regression comparison of {inline(s.name, 60)} NOT VERIFIED: "
        f"{inline(s.baseline.not_verified, 400)}"
        for s in verdict.stages
        if s.baseline is not None and s.baseline.not_verified
    ]
    return (*skipped, *baselines)


def summary_view(verdict: Verdict, ctx: Context) -> SummaryView:
    """The view of the summary across all stages."""
    deductions = [
        (inline(s.name, 60), d.severity.value, f"-{d.points}", inline(d.title, 200))
        for s in verdict.stages
        for d in s.deductions
    ]
    flaky = tuple(
        f"{inline(s.name, 60)}: {inline(c.nodeid, 200)} ({c.attempts} attempts)"
        for s in verdict.stages
        if s.data.suite is not None
        for c in s.data.suite.cases
        if c.outcome == "flaky"
    )
    return SummaryView(
        decision=verdict.decision.value,
        score=verdict.score,
        generated_at=ctx.generated_at,
        commit=code(ctx.commit, 40),
        banners=_banners(verdict),
        stages=table(_STAGE_HEADER, _stage_rows(verdict, ctx)),
        blocking_reasons=tuple(inline(r, 300) for r in verdict.blocking_reasons[:MAX_ROWS]),
        required_fixes=tuple(inline(f, 300) for f in verdict.required_fixes[:MAX_ROWS]),
        deductions=table(("Stage", "Severity", "Points", "Finding"), deductions),
        flaky=flaky[:MAX_ROWS],
        run_url=ctx.run_url,
        gate_files=tuple(code(f, 200) for f in ctx.gate_files[:MAX_ROWS]),
    )
