"""Findings, statuses, scores and the decision, from hand-built measurements."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from stagegate.baseline import compare_to_baseline
from stagegate.judge import StageData, StageVerdict, decide, judge_stage
from stagegate.model import (
    Benchmark,
    Comparison,
    Coverage,
    Location,
    PrecisionResult,
    Severity,
    StageStatus,
    TestCase,
    TestSuite,
    WarningEntry,
)
from stagegate.policy import Policy
from stagegate.records import StageRecord

POLICY = Policy()


def record(stage: str = "execution", **kw: object) -> StageRecord:
    base = {
        "stage": stage,
        "command": ["pytest"],
        "exit_code": 0,
        "start": "2026-01-01T00:00:00Z",
        "duration_s": 1.0,
    }
    return StageRecord(**{**base, **kw})


def suite(*cases: TestCase) -> TestSuite:
    return TestSuite(cases=cases, source="junit.xml")


def case(name: str, outcome: str = "passed", **kw: object) -> TestCase:
    return TestCase(
        nodeid=f"tests/t.py::{name}",
        file="tests/t.py",
        name=name,
        outcome=outcome,
        duration_s=kw.pop("duration_s", 0.01),
        **kw,
    )  # type: ignore[arg-type]


def precision(name: str, step_ms: float, **kw: object) -> PrecisionResult:
    base = dict(
        status="ok",
        error=None,
        precision_used=name,
        step_time_ms=step_ms,
        iqr_ms=step_ms * 0.02,
        window_s=(1.0,) * 5,
        tokens_per_second=1e6 / step_ms,
        peak_mb=1000.0,
        val_loss=2.0,
        val_accuracy=0.9,
        overflow_steps=0,
        loss_curve=(3.0, 2.0),
        memory_growth_mb_per_window=0.0,
        memory_source="cuda_allocated",
        syncs_measured=True,
        syncs_per_step=0.0,
    )
    return PrecisionResult(name=name, **{**base, **kw})  # type: ignore[arg-type]


def bench(
    gpu: bool = True,
    speedup: float = 4.0,
    mem: float = 50.0,
    acc: float = 0.001,
    **precision_kw: object,
) -> Benchmark:
    return Benchmark(
        preset="gpu" if gpu else "cpu-smoke",
        device="cuda" if gpu else "cpu",
        gpu_verified=gpu,
        gpu_name="NVIDIA H100 80GB HBM3" if gpu else None,
        torch="2.13.0",
        cuda="12.8",
        driver="570",
        datetime="2026-01-01T00:00:00Z",
        commit="abc",
        precisions=(
            precision("32-true", 400.0),
            precision("bf16-mixed", 400.0 / speedup, **precision_kw),
        ),
        comparisons=(
            Comparison(
                "bf16-mixed", "32-true", speedup, (speedup * 0.9, speedup * 1.1), mem, mem, acc, 0.0
            ),
        ),
    )


def kinds(verdict) -> list[tuple[str, str]]:
    return [(f.severity.value, f.kind) for f in verdict.findings]


def test_a_clean_stage_passes_with_a_full_score() -> None:
    v = judge_stage("execution", StageData(record(), suite=suite(case("a"), case("b"))), POLICY)
    assert v.status is StageStatus.PASS and v.score == 100 and v.findings == ()


def test_a_failed_test_is_critical_with_its_location() -> None:
    failed = case("b", "failed", message="assert 1 == 2", location=Location("tests/t.py", 7))
    v = judge_stage(
        "execution", StageData(record(exit_code=1), suite=suite(case("a"), failed)), POLICY
    )
    assert v.status is StageStatus.FAIL and kinds(v) == [("CRITICAL", "test_failed")]
    assert v.findings[0].location == Location("tests/t.py", 7) and v.score == 60


def test_integration_raising_is_reported_with_the_raising_line() -> None:
    raised = case(
        "test_fine_tuning",
        "failed",
        message="KeyError: 'train_data'",
        location=Location("src/amptrain/legacy.py", 80),
    )
    v = judge_stage(
        "integration", StageData(record("integration", exit_code=1), suite=suite(raised)), POLICY
    )
    assert kinds(v) == [("CRITICAL", "integration_raised")]
    assert "src/amptrain/legacy.py:80" in v.findings[0].fix


def test_exit_code_without_an_explaining_finding_is_critical() -> None:
    v = judge_stage(
        "execution",
        StageData(record(exit_code=4, stderr_tail="usage error"), suite=suite(case("a"))),
        POLICY,
    )
    assert kinds(v) == [("CRITICAL", "stage_failed")] and "exited 4" in v.findings[0].title


@pytest.mark.parametrize(
    ("kw", "title"),
    [
        ({"timed_out": True, "exit_code": None}, "timed out"),
        ({"signal": 9, "exit_code": None}, "signal 9"),
        ({"error": "cannot start 'pytest'", "exit_code": None}, "could not start"),
    ],
)
def test_a_crashed_stage_is_an_error_and_never_passes(kw: dict, title: str) -> None:
    v = judge_stage("execution", StageData(record(**kw), suite=suite(case("a"))), POLICY)
    assert v.status is StageStatus.ERROR and title in v.findings[0].title
    assert decide([v]).decision == "BLOCK"


def test_unreadable_output_is_an_error_even_with_exit_zero() -> None:
    v = judge_stage(
        "execution", StageData(record(), input_errors=("JUnit file j.xml is empty",)), POLICY
    )
    assert v.status is StageStatus.ERROR and kinds(v) == [("CRITICAL", "stage_failed")]


def test_zero_tests_is_not_a_pass() -> None:
    v = judge_stage("execution", StageData(record(), suite=suite()), POLICY)
    assert v.status is StageStatus.FAIL and "no test ran" in v.findings[0].title


def test_skips_warnings_slow_tests_and_coverage() -> None:
    data = StageData(
        record(),
        suite=suite(
            case("a", duration_s=9.0),
            case("s1", "skipped", message="needs CUDA"),
            case("s2", "skipped", message="needs CUDA"),
        ),
        coverage=Coverage(72.5, ()),
        warnings=(
            WarningEntry("FutureWarning", "torch.cuda.amp is deprecated", Location("x.py", 3), 2),
            WarningEntry("FutureWarning", "other", Location("y.py", 1), 1),
            WarningEntry("UserWarning", "fyi", Location("z.py", 1), 1),
        ),
    )
    v = judge_stage("execution", data, POLICY)
    assert sorted(kinds(v)) == sorted(
        [
            ("HIGH", "coverage_below_floor"),
            ("INFO", "slow_test"),
            ("LOW", "deprecation_warning"),
            ("LOW", "deprecation_warning"),
            ("INFO", "other_warning"),
            ("INFO", "skipped_test"),
        ]
    )
    skipped = next(f for f in v.findings if f.kind == "skipped_test")
    assert skipped.title == "2 skipped: needs CUDA"
    assert v.score == 100 - 20 - 1 - 1 and v.status is StageStatus.FAIL  # slowness is not scored


def test_missing_required_stage_blocks_and_skippable_is_not_verified() -> None:
    missing = judge_stage("integration", StageData(record=None), POLICY)
    skipped = judge_stage("performance", StageData(record=None), POLICY)
    assert missing.status is StageStatus.MISSING and kinds(missing) == [
        ("CRITICAL", "stage_failed")
    ]
    assert skipped.status is StageStatus.NOT_VERIFIED and skipped.findings == ()
    assert decide([skipped]).decision == "PASS"
    assert decide([skipped, missing]).decision == "BLOCK"


def test_gpu_targets_met_pass() -> None:
    v = judge_stage("performance", StageData(record("performance"), benchmark=bench()), POLICY)
    assert v.status is StageStatus.PASS, v.findings


@pytest.mark.parametrize(
    ("kw", "metric"),
    [
        ({"speedup": 1.2}, "speedup"),
        ({"mem": 12.0}, "peak_memory_reduction_pct"),
        ({"acc": 0.02}, "accuracy_diff"),
        ({"speedup": math.nan}, "speedup"),
    ],
)
def test_a_missed_gpu_target_is_high(kw: dict, metric: str) -> None:
    v = judge_stage("performance", StageData(record("performance"), benchmark=bench(**kw)), POLICY)
    assert ("HIGH", "threshold_missed") in kinds(v) and v.status is StageStatus.FAIL
    assert any(metric in f.detail for f in v.findings)


def test_tf32_is_held_to_accuracy_parity_not_to_the_amp_targets() -> None:
    b = bench()
    tf32 = Comparison("32-tf32", "32-true", 1.0, (0.9, 1.1), 0.0, 0.0, 0.001, 0.0)
    v = judge_stage(
        "performance",
        StageData(record("performance"), benchmark=replace(b, comparisons=(*b.comparisons, tf32))),
        POLICY,
    )
    assert v.status is StageStatus.PASS, v.findings
    off = replace(tf32, accuracy_diff=0.2)
    v = judge_stage(
        "performance",
        StageData(record("performance"), benchmark=replace(b, comparisons=(off,))),
        POLICY,
    )
    assert [f.title for f in v.findings] == ["32-tf32 vs 32-true: accuracy_diff misses its target"]


@pytest.mark.parametrize("name", ["16-mixed", "bf16-mixed", "16-true", "bf16-true"])
def test_every_16_bit_precision_is_held_to_the_amp_targets(name: str) -> None:
    slow = Comparison(name, "32-true", 1.0, (0.9, 1.1), 0.0, 0.0, 0.001, 0.0)
    v = judge_stage(
        "performance",
        StageData(record("performance"), benchmark=replace(bench(), comparisons=(slow,))),
        POLICY,
    )
    assert sorted(f.title.split(": ")[1] for f in v.findings) == [
        "activation_memory_reduction_pct misses its target",
        "peak_memory_reduction_pct misses its target",
        "speedup misses its target",
    ]


def test_cpu_smoke_is_not_verified_unless_required() -> None:
    data = StageData(record("performance"), benchmark=bench(gpu=False, speedup=0.7, mem=math.nan))
    local = judge_stage("performance", data, POLICY)
    assert local.status is StageStatus.NOT_VERIFIED and "NOT VERIFIED" in local.note
    assert not any(f.kind == "threshold_missed" for f in local.findings)
    gate = judge_stage("performance", data, POLICY.require(("performance",)))
    assert gate.status is StageStatus.FAIL
    assert ("CRITICAL", "stage_failed") in kinds(gate)
    assert decide([gate]).decision == "BLOCK"


def test_benchmark_health_findings() -> None:
    b = bench(
        memory_growth_mb_per_window=12.0,
        syncs_per_step=1.0,
        sync_locations=({"location": "src/amptrain/engine.py:120", "count": 3, "message": "m"},),
    )
    v = judge_stage("performance", StageData(record("performance"), benchmark=b), POLICY)
    assert {("HIGH", "memory_growth"), ("HIGH", "host_sync")} <= set(kinds(v))
    sync = next(f for f in v.findings if f.kind == "host_sync")
    assert "src/amptrain/engine.py:120 x3" in sync.detail
    assert sync.location == Location("src/amptrain/engine.py", 120)
    assert decide([v]).decision == "BLOCK"  # a sync in the step can block, as promised


def _cpu_bench(**kw: object) -> Benchmark:
    clean = dict(
        sync_method="dispatch",
        matmul_dtypes={"bfloat16": 11},
        matmul_dtype_expected="bfloat16",
        live_graph_tensors=0,
        live_growth_pct_per_window=0.002,
        memory_source="process_rss",
    )
    b = bench(gpu=False, speedup=0.7, mem=math.nan)
    mixed = replace(b.precisions[1], **{**clean, **kw})
    return replace(b, precisions=(b.precisions[0], mixed))


@pytest.mark.parametrize(
    ("fault", "kind", "title"),
    [
        ({"syncs_per_step": 1.0}, "host_sync", "1 host-device syncs per training step"),
        ({"matmul_dtypes": {"float32": 11}}, "autocast_mismatch", "do not compute in bfloat16"),
        ({"matmul_dtypes": {"bfloat16": 9, "float32": 2}}, "autocast_mismatch", "bfloat16"),
        ({"live_graph_tensors": 54}, "memory_growth", "keep an autograd graph alive"),
        ({"live_growth_pct_per_window": 2.5}, "memory_growth", "tensors pile up"),
        ({"status": "nonfinite", "error": "non-finite loss"}, "benchmark_failed", "nonfinite"),
    ],
)
def test_the_cpu_run_judges_what_it_measured(fault: dict, kind: str, title: str) -> None:
    clean = judge_stage(
        "performance", StageData(record("performance"), benchmark=_cpu_bench()), POLICY
    )
    assert clean.status is StageStatus.NOT_VERIFIED and decide([clean]).decision == "PASS"
    assert "What the CPU run measured was judged" in clean.note
    data = StageData(record("performance"), benchmark=_cpu_bench(**fault))
    v = judge_stage("performance", data, POLICY)
    found = [f for f in v.findings if f.kind == kind]
    assert found and title in found[0].title and found[0].severity.blocks
    assert v.status is StageStatus.FAIL and decide([v]).decision == "BLOCK"


def test_accuracy_parity_is_judged_on_cpu_and_speed_is_not() -> None:
    b = _cpu_bench()
    b = replace(b, comparisons=(replace(b.comparisons[0], accuracy_diff=0.2),))
    v = judge_stage("performance", StageData(record("performance"), benchmark=b), POLICY)
    titles = [f.title for f in v.findings if f.kind == "threshold_missed"]
    assert titles == ["bf16-mixed vs 32-true: accuracy_diff misses its target"]


def test_a_failed_precision_is_critical() -> None:
    b = bench()
    b = replace(
        b,
        precisions=(
            *b.precisions,
            PrecisionResult("16-mixed", "oom", "CUDA out of memory", "16-mixed"),
        ),
    )
    v = judge_stage("performance", StageData(record("performance"), benchmark=b), POLICY)
    assert ("CRITICAL", "benchmark_failed") in kinds(v)


def test_baseline_regression_beyond_noise_is_high_and_other_gpu_is_not_comparable() -> None:
    base = bench()
    slower = replace(base, precisions=(precision("32-true", 400.0), precision("bf16-mixed", 150.0)))
    cmp = compare_to_baseline(slower, base, 10.0)
    v = judge_stage(
        "performance", StageData(record("performance"), benchmark=slower, baseline=cmp), POLICY
    )
    assert ("HIGH", "regression") in kinds(v)
    noisy = compare_to_baseline(
        replace(base, precisions=(precision("32-true", 430.0), precision("bf16-mixed", 100.0))),
        base,
        10.0,
    )
    assert noisy.regressions == ()  # +7.5% is inside the 10% margin
    other = compare_to_baseline(replace(slower, gpu_name="NVIDIA A100-SXM4-80GB"), base, 10.0)
    assert not other.comparable and "GPU differs" in other.reason and other.changes == ()


def test_decision_lists_reasons_and_fixes_and_sums_deductions() -> None:
    a = judge_stage(
        "execution",
        StageData(
            record(exit_code=1), suite=suite(case("b", "failed", location=Location("t.py", 1)))
        ),
        POLICY,
    )
    b = judge_stage("static", StageData(record("static")), POLICY)
    d = decide([a, b])
    assert d.decision == "BLOCK" and d.score == 60
    assert d.blocking_reasons[0] == "required stage execution is FAIL"
    assert any("tests/t.py::b failed" in r for r in d.blocking_reasons)
    assert d.required_fixes and all(": " in f for f in d.required_fixes)
    assert decide([b]).decision == "PASS" and decide([b]).score == 100
    assert Severity.CRITICAL.blocks and not Severity.MEDIUM.blocks


def _verdict(name: str, status: StageStatus, required: bool) -> StageVerdict:
    return StageVerdict(name, status, required, 100, (), (), StageData(None))


def test_a_stage_that_is_not_required_still_blocks_when_it_fails() -> None:
    passing = [_verdict("static", StageStatus.PASS, True)]
    assert decide([*passing, _verdict("performance", StageStatus.PASS, False)]).decision == "PASS"
    assert decide(
        [*passing, _verdict("performance", StageStatus.NOT_VERIFIED, False)]
    ).decision == ("PASS")
    for status in (StageStatus.FAIL, StageStatus.ERROR):
        verdict = decide([*passing, _verdict("performance", status, False)])
        assert verdict.decision == "BLOCK"
        assert verdict.blocking_reasons == (f"stage performance is {status.value}",)
