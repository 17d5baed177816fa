"""The performance view formats the judge's outcomes: each comparison row's status is the
judge's, whatever the figures; a metric it could not check reads NOT VERIFIED, never MISS."""

from __future__ import annotations

from dataclasses import replace

from stagegate.judge import judge_stage
from stagegate.model import (
    CheckOutcome,
    Comparison,
    MetricCheck,
    StageData,
    StageStatus,
    StageVerdict,
)
from stagegate.view.performance import performance_sections

from ..builders import REPO_POLICY, bench, cpu_bench, performance, record

POLICY = REPO_POLICY


def rows(stage: StageVerdict) -> list[tuple[str, ...]]:
    """The rows of the targets table (Comparison, Metric, Value, Target, Status)."""
    metrics = next(s for s in performance_sections(stage) if s.title == "Performance Metrics")
    (targets,) = [t for t in metrics.tables if t.header[-1] == "Status"]
    return list(targets.rows)


def test_a_passing_run_shows_no_miss_even_where_a_figure_is_under_a_target() -> None:
    b = bench(step_ms={"32-tf32": 450.0})  # slower than fp32, as much memory: no AMP target
    stage = judge_stage("performance", performance(b), POLICY)
    assert stage.status is StageStatus.PASS
    shown = rows(stage)
    compared = len(b.precisions) - 1 + 2  # each against 32-true; 16-bit ones against 32-tf32
    assert len(shown) == 4 * compared and not [r for r in shown if "MISS" in r[-1]]
    assert [r[-1] for r in shown if r[0] == "32-tf32 vs 32-true"] == ["reported"] * 3 + ["PASS"]


def test_what_a_cpu_run_could_not_check_reads_not_verified() -> None:
    stage = judge_stage("performance", performance(cpu_bench()), POLICY)
    statuses = {r[1]: r[-1] for r in rows(stage)}
    assert stage.status is StageStatus.NOT_VERIFIED
    for metric in ("speedup", "peak_memory_reduction_pct", "activation_memory_reduction_pct"):
        assert statuses[metric].startswith("NOT VERIFIED") and "no GPU" in statuses[metric]
    assert statuses["accuracy_diff"] == "PASS"


def test_a_row_says_what_the_judge_decided_not_what_the_figures_would_give() -> None:
    """A view that compared the figure with the target itself would flip both rows."""
    c = Comparison("bf16-mixed", "32-true", 4.0, (3.9, 4.1), 50.0, 50.0, 0.5, 0.0)
    checks = (
        MetricCheck(c, "speedup", 4.0, ">= 1.5x", CheckOutcome.MISSED, "planted"),
        MetricCheck(c, "accuracy_diff", 0.5, "< 0.01", CheckOutcome.MET),
    )
    stage = judge_stage("performance", performance(bench()), POLICY)
    shown = rows(replace(stage, checks=checks))
    assert [(r[1], r[-1]) for r in shown] == [("speedup", "MISS"), ("accuracy_diff", "PASS")]
    assert shown[0][2].startswith("4.00x") and shown[0][3] == ">= 1.5x"


def test_every_miss_shown_is_a_blocking_finding_of_the_stage() -> None:
    for b in (bench(speedup=1.2, acc=0.3), bench(mem=10.0), cpu_bench(), bench()):
        stage = judge_stage("performance", performance(b), POLICY)
        missed = [f"{r[0]}: {r[1]}" for r in rows(stage) if r[-1] == "MISS"]
        blocking = [f.title for f in stage.blocking if f.kind == "threshold_missed"]
        assert [m + " misses its target" for m in missed] == blocking


def test_a_stage_without_a_benchmark_shows_no_performance_section() -> None:
    stage = judge_stage("execution", StageData(record()), POLICY)
    assert performance_sections(stage) == []
