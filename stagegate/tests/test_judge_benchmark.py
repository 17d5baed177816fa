"""The benchmark judged: each comparison metric's outcome against its target, per-precision
health checks, and failed precisions."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from stagegate.judge import decide, judge_stage
from stagegate.model import CheckOutcome, Decision, Location, PrecisionResult, StageStatus
from stagegate.policy import Policy

from .builders import bench, comparison, cpu_bench, performance

POLICY = Policy()
GPU_TARGETS = ("speedup", "peak_memory_reduction_pct", "activation_memory_reduction_pct")


def kinds(verdict) -> list[tuple[str, str]]:
    return [(f.severity.value, f.kind) for f in verdict.findings]


def outcomes(verdict) -> dict[tuple[str, str, str], CheckOutcome]:
    return {
        (c.comparison.precision, c.comparison.baseline, c.metric): c.outcome for c in verdict.checks
    }


def test_gpu_targets_met_pass_with_every_metric_checked() -> None:
    v = judge_stage("performance", performance(bench()), POLICY)
    assert v.status is StageStatus.PASS, v.findings
    assert [c.metric for c in v.checks] == [*GPU_TARGETS, "accuracy_diff"]
    assert {c.outcome for c in v.checks} == {CheckOutcome.MET}
    assert {c.target for c in v.checks} >= {">= 1.5x", "< 0.01"}


@pytest.mark.parametrize(
    ("kw", "metric"),
    [
        ({"speedup": 1.2}, "speedup"),
        ({"mem": 12.0}, "peak_memory_reduction_pct"),
        ({"acc": 0.02}, "accuracy_diff"),
        ({"speedup": math.nan}, "speedup"),
    ],
)
def test_a_missed_gpu_target_is_high_and_its_outcome_a_miss(kw: dict, metric: str) -> None:
    v = judge_stage("performance", performance(bench(**kw)), POLICY)
    assert ("HIGH", "threshold_missed") in kinds(v) and v.status is StageStatus.FAIL
    missed = next(c for c in v.checks if c.metric == metric)
    assert missed.outcome is CheckOutcome.MISSED and metric in missed.why
    assert any(metric in f.detail for f in v.findings if f.kind == "threshold_missed")


def test_tf32_is_held_to_accuracy_parity_not_to_the_amp_targets() -> None:
    b = bench()
    tf32 = comparison("32-tf32", speedup=1.0, peak_memory_reduction_pct=0.0)
    v = judge_stage(
        "performance", performance(replace(b, comparisons=(*b.comparisons, tf32))), POLICY
    )
    assert v.status is StageStatus.PASS, v.findings
    tf32_outcomes = {m: o for (p, _, m), o in outcomes(v).items() if p == "32-tf32"}
    assert tf32_outcomes == {
        **dict.fromkeys(GPU_TARGETS, CheckOutcome.REPORTED),
        "accuracy_diff": CheckOutcome.MET,
    }
    off = replace(tf32, accuracy_diff=0.2)
    v = judge_stage("performance", performance(replace(b, comparisons=(off,))), POLICY)
    (missed,) = v.findings
    assert "32-tf32" in missed.title and "accuracy_diff" in missed.title


@pytest.mark.parametrize("name", ["16-mixed", "bf16-mixed", "16-true", "bf16-true"])
def test_every_16_bit_precision_is_held_to_the_amp_targets(name: str) -> None:
    slow = comparison(
        name, speedup=1.0, peak_memory_reduction_pct=0.0, activation_memory_reduction_pct=0.0
    )
    v = judge_stage("performance", performance(replace(bench(), comparisons=(slow,))), POLICY)
    missed = sorted(c.metric for c in v.checks if c.outcome is CheckOutcome.MISSED)
    assert missed == sorted(GPU_TARGETS)
    assert sorted(f.title.split(": ")[1].split(" ")[0] for f in v.findings) == missed


def test_a_comparison_against_another_baseline_is_reported_never_judged() -> None:
    other = comparison("bf16-mixed", speedup=0.5, baseline="16-mixed", accuracy_diff=0.5)
    b = bench()
    v = judge_stage(
        "performance", performance(replace(b, comparisons=(*b.comparisons, other))), POLICY
    )
    assert v.status is StageStatus.PASS and not v.findings
    assert {o for (_, base, _), o in outcomes(v).items() if base == "16-mixed"} == {
        CheckOutcome.REPORTED
    }


def test_on_a_cpu_the_gpu_targets_are_not_verified_and_accuracy_is_judged() -> None:
    v = judge_stage("performance", performance(cpu_bench()), POLICY)
    assert v.status is StageStatus.NOT_VERIFIED and decide([v]).decision is Decision.PASS
    for check in v.checks:
        if check.metric in GPU_TARGETS:
            assert check.outcome is CheckOutcome.NOT_VERIFIED and check.why  # never a miss
        else:
            assert check.outcome is CheckOutcome.MET
    b = cpu_bench()
    b = replace(b, comparisons=(replace(b.comparisons[0], accuracy_diff=0.2),))
    v = judge_stage("performance", performance(b), POLICY)
    assert [f.title for f in v.findings if f.kind == "threshold_missed"] == [
        "bf16-mixed vs 32-true: accuracy_diff misses its target"
    ]


def test_every_miss_has_its_blocking_finding_and_nothing_else_is_a_miss() -> None:
    b = bench(speedup=1.1, acc=0.5)
    tf32 = comparison("32-tf32", speedup=0.9, accuracy_diff=0.0)
    for data in (
        performance(replace(b, comparisons=(*b.comparisons, tf32))),
        performance(cpu_bench()),
    ):
        v = judge_stage("performance", data, POLICY)
        missed = {
            f"{c.comparison.precision} vs {c.comparison.baseline}: {c.metric}"
            for c in v.checks
            if c.outcome is CheckOutcome.MISSED
        }
        found = {
            f.title.removesuffix(" misses its target")
            for f in v.blocking
            if f.kind == "threshold_missed"
        }
        assert missed == found


def test_benchmark_health_findings() -> None:
    b = bench(
        memory_growth_mb_per_window=12.0,
        syncs_per_step=1.0,
        sync_locations=({"location": "src/amptrain/engine.py:120", "count": 3, "message": "m"},),
    )
    v = judge_stage("performance", performance(b), POLICY)
    assert {("HIGH", "memory_growth"), ("HIGH", "host_sync")} <= set(kinds(v))
    sync = next(f for f in v.findings if f.kind == "host_sync")
    assert "src/amptrain/engine.py:120" in sync.detail and "3" in sync.detail
    assert sync.location == Location("src/amptrain/engine.py", 120)
    assert decide([v]).decision is Decision.BLOCK  # a sync in the step can block, as promised


@pytest.mark.parametrize(
    ("fault", "kind", "said"),
    [
        ({"syncs_per_step": 1.0}, "host_sync", "1"),
        ({"matmul_dtypes": {"float32": 11}}, "autocast_mismatch", "bfloat16"),
        ({"matmul_dtypes": {"bfloat16": 9, "float32": 2}}, "autocast_mismatch", "bfloat16"),
        ({"live_graph_tensors": 54}, "memory_growth", "graph"),
        ({"live_growth_pct_per_window": 2.5}, "memory_growth", "tensors"),
        ({"status": "nonfinite", "error": "non-finite loss"}, "benchmark_failed", "nonfinite"),
    ],
)
def test_the_cpu_run_judges_what_it_measured(fault: dict, kind: str, said: str) -> None:
    clean = judge_stage("performance", performance(cpu_bench()), POLICY)
    assert clean.status is StageStatus.NOT_VERIFIED and decide([clean]).decision is Decision.PASS
    v = judge_stage("performance", performance(cpu_bench(**fault)), POLICY)
    found = [f for f in v.findings if f.kind == kind]
    assert found and said in found[0].title and "bf16-mixed" in found[0].title
    assert found[0].severity.blocks
    assert v.status is StageStatus.FAIL and decide([v]).decision is Decision.BLOCK


def test_a_failed_precision_is_critical() -> None:
    b = bench()
    oom = PrecisionResult("16-mixed", "oom", "CUDA out of memory", "16-mixed")
    v = judge_stage("performance", performance(replace(b, precisions=(*b.precisions, oom))), POLICY)
    (failed,) = [f for f in v.findings if f.kind == "benchmark_failed"]
    assert failed.severity.value == "CRITICAL" and "16-mixed" in failed.title
    assert failed.detail == "CUDA out of memory"
