"""The benchmark judged: each comparison metric's outcome against its target, per-precision
health checks, and failed precisions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stagegate.judge import decide, judge_stage
from stagegate.judge.derive import pairs
from stagegate.judge.policy import Policy
from stagegate.model import (
    Benchmark,
    CheckOutcome,
    Decision,
    Location,
    MetricCheck,
    PrecisionResult,
    StageStatus,
    StageVerdict,
)

from ..builders import (
    REPO_POLICY,
    bench,
    cpu_bench,
    growing,
    performance,
    precision,
    with_precisions,
)

POLICY = REPO_POLICY
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
    judged = {k: o for k, o in outcomes(v).items() if k[1] == "32-true"}
    for amp in ("16-mixed", "bf16-mixed"):
        assert {m: o for (p, _, m), o in judged.items() if p == amp} == dict.fromkeys(
            (*GPU_TARGETS, "accuracy_diff"), CheckOutcome.MET
        )
    assert {o for (_, base, _), o in outcomes(v).items() if base == "32-tf32"} == {
        CheckOutcome.REPORTED
    }
    assert {c.target for c in v.checks} >= {">= 1.5x", "< 0.01"}


@pytest.mark.parametrize(
    ("kw", "metric"),
    [
        ({"speedup": 1.2}, "speedup"),
        ({"mem": 12.0}, "peak_memory_reduction_pct"),
        ({"acc": 0.02}, "accuracy_diff"),
    ],
)
def test_a_missed_gpu_target_is_high_and_its_outcome_a_miss(kw: dict, metric: str) -> None:
    v = judge_stage("performance", performance(bench(**kw)), POLICY)
    assert ("HIGH", "threshold_missed") in kinds(v) and v.status is StageStatus.FAIL
    missed = outcomes(v)[("bf16-mixed", "32-true", metric)]
    assert missed is CheckOutcome.MISSED
    assert any(metric in f.detail for f in v.findings if f.kind == "threshold_missed")
    assert not [f for f in v.findings if f.kind.startswith("evidence_")]  # sound, just slow


def test_the_targets_are_judged_on_the_figures_derived_from_the_raw_ones() -> None:
    b = bench(speedup=1.2, mem=12.0)
    v = judge_stage("performance", performance(b), POLICY)
    check = {(c.comparison.precision, c.comparison.baseline, c.metric): c for c in v.checks}
    speedup = check[("bf16-mixed", "32-true", "speedup")]
    assert speedup.outcome is CheckOutcome.MISSED and speedup.value == pytest.approx(1.2)
    assert speedup.comparison.speedup_ci95[1] < 1.5  # the interval shown is the gate's own
    assert check[("bf16-mixed", "32-true", "peak_memory_reduction_pct")].value == pytest.approx(12)
    assert not [f for f in v.findings if f.kind.startswith("evidence_")]


def test_the_judge_decides_which_precisions_are_compared() -> None:
    """Each against IEEE fp32, the others against TF32, fp8 against bf16-mixed; a failed
    precision is compared with nothing."""
    ran = ["32-true", "32-tf32", "bf16-mixed", "fp8"]
    assert pairs(ran, "32-true") == [
        ("32-tf32", "32-true"),
        ("bf16-mixed", "32-true"),
        ("fp8", "32-true"),
        ("bf16-mixed", "32-tf32"),
        ("fp8", "32-tf32"),
        ("fp8", "bf16-mixed"),
    ]
    assert pairs(["32-true", "bf16-mixed"], "32-true") == [("bf16-mixed", "32-true")]
    assert pairs(["bf16-mixed", "fp8"], "32-true") == [("fp8", "bf16-mixed")]


def test_tf32_is_held_to_accuracy_parity_not_to_the_amp_targets() -> None:
    b = bench(step_ms={"32-tf32": 400.0})  # no faster than fp32: no target says it must be
    v = judge_stage("performance", performance(b), POLICY)
    assert v.status is StageStatus.PASS, v.findings
    tf32_outcomes = {m: o for (p, _, m), o in outcomes(v).items() if p == "32-tf32"}
    assert tf32_outcomes == {
        **dict.fromkeys(GPU_TARGETS, CheckOutcome.REPORTED),
        "accuracy_diff": CheckOutcome.MET,
    }
    off = precision("32-tf32", 160.0, accuracy=0.7)
    v = judge_stage("performance", performance(with_precisions(b, off)), POLICY)
    missed = [f.title for f in v.findings if f.kind == "threshold_missed"]
    assert any("32-tf32 vs 32-true" in t and "accuracy_diff" in t for t in missed)


def _only(*precisions: str) -> Policy:
    """The default policy, its gpu preset measuring ``precisions`` only."""
    spec = replace(POLICY.benchmark.presets["gpu"], precisions=precisions)
    spec = replace(spec, measures=("speed", "memory", "accuracy", "syncs"))
    presets = {**POLICY.benchmark.presets, "gpu": spec}
    return replace(POLICY, benchmark=replace(POLICY.benchmark, presets=presets))


@pytest.mark.parametrize("name", ["16-mixed", "bf16-mixed", "16-true", "bf16-true"])
def test_every_16_bit_precision_is_held_to_the_amp_targets(name: str) -> None:
    slow = precision(name, 400.0)  # as fast as fp32, with as much memory
    b = bench()
    b = replace(b, precisions=(b.precisions[0], slow))
    v = judge_stage("performance", performance(b), _only("32-true", name))
    missed = sorted(c.metric for c in v.checks if c.outcome is CheckOutcome.MISSED)
    assert missed == sorted(GPU_TARGETS)
    titles = [f.title for f in v.findings if f.kind == "threshold_missed"]
    assert sorted(t.split(": ")[1].split(" ")[0] for t in titles) == missed
    assert not [f for f in v.findings if f.kind.startswith("evidence_")]


def test_a_comparison_against_another_baseline_is_reported_never_judged() -> None:
    b = bench(step_ms={"32-tf32": 90.0})  # TF32 faster than bf16-mixed: no target says not
    v = judge_stage("performance", performance(b), POLICY)
    assert v.status is StageStatus.PASS and not v.findings, v.findings
    against_tf32 = {o for (_, base, _), o in outcomes(v).items() if base == "32-tf32"}
    assert against_tf32 == {CheckOutcome.REPORTED}


def test_on_a_cpu_the_gpu_targets_are_not_verified_and_accuracy_is_judged() -> None:
    v = judge_stage("performance", performance(cpu_bench()), POLICY)
    assert v.status is StageStatus.NOT_VERIFIED and decide([v]).decision is Decision.PASS
    for check in v.checks:
        if check.metric in GPU_TARGETS:
            assert check.outcome is CheckOutcome.NOT_VERIFIED and "no GPU" in check.why
        else:
            assert check.outcome is CheckOutcome.MET
    v = judge_stage("performance", performance(cpu_bench(val_accuracy=0.7)), POLICY)
    assert [f.title for f in v.findings if f.kind == "threshold_missed"] == [
        "bf16-mixed vs 32-true: accuracy_diff misses its target"
    ]


def test_every_miss_has_its_blocking_finding_and_nothing_else_is_a_miss() -> None:
    for data in (
        performance(bench(speedup=1.1, acc=0.5, step_ms={"32-tf32": 450.0})),
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
        memory_change_mb=growing(12.0),
        sync_count=3,
        sync_steps=3,
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
        ({"sync_count": 3, "sync_steps": 3}, "host_sync", "1"),
        ({"matmul_dtypes": {"float32": 11}}, "autocast_mismatch", "bfloat16"),
        ({"matmul_dtypes": {"bfloat16": 9, "float32": 2}}, "autocast_mismatch", "bfloat16"),
        ({"live_graph_tensors": 54}, "memory_growth", "graph"),
        ({"live_bytes_change": growing(25_000.0)}, "memory_growth", "tensors"),  # 2.5% of 1 MB
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
    oom = PrecisionResult("16-mixed", "oom", "CUDA out of memory", "16-mixed")
    v = judge_stage("performance", performance(with_precisions(bench(), oom)), POLICY)
    (failed,) = [f for f in v.findings if f.kind == "benchmark_failed"]
    assert failed.severity.value == "CRITICAL" and "16-mixed" in failed.title
    assert failed.detail == "CUDA out of memory"
    # its comparisons are absent, as the benchmark leaves them: no second finding for them
    assert not [f for f in v.findings if f.kind.startswith("evidence_")]


@pytest.mark.parametrize(
    ("status", "error", "fix"),
    [
        ("oom", "CUDA out of memory", "batch size"),
        ("nonfinite", "non-finite training loss at timed step 3", "loss curve"),
        ("error", "RuntimeError: boom", "traceback"),
        ("error", None, "traceback"),
    ],
)
def test_a_failed_precision_says_how_to_fix_what_failed(
    status: str, error: str | None, fix: str
) -> None:
    failed = PrecisionResult("16-mixed", status, error, "16-mixed")
    v = judge_stage("performance", performance(with_precisions(bench(), failed)), POLICY)
    (finding,) = [f for f in v.findings if f.kind == "benchmark_failed"]
    assert fix in finding.fix and finding.detail == (error or "")


def test_a_failed_precision_leaves_the_others_judged() -> None:
    """The health checks go on past a failed precision to every one after it."""
    b = bench(sync_count=3)  # over 3 steps
    failed = PrecisionResult("32-tf32", "error", "boom", "32-tf32")
    ordered = replace(b, precisions=(failed, *[p for p in b.precisions if p.name != "32-tf32"]))
    v = judge_stage("performance", performance(ordered), POLICY)
    assert [f.title for f in v.findings if f.kind == "host_sync"] == [
        "bf16-mixed: 1 host-device syncs per training step"
    ]


def test_a_host_sync_names_its_first_five_places_and_the_first_as_location() -> None:
    places = [{"location": f"src/m{i}.py:{i + 1}", "count": i + 1} for i in range(6)]
    v = judge_stage(
        "performance",
        performance(bench(sync_count=6, sync_locations=tuple(places))),
        POLICY,
    )
    (sync,) = [f for f in v.findings if f.kind == "host_sync"]
    assert sync.detail == ", ".join(f"src/m{i}.py:{i + 1} x{i + 1}" for i in range(5))
    assert sync.location == Location("src/m0.py", 1)


@pytest.mark.parametrize(
    ("text", "location"),
    [
        ("C:/work/src/engine.py:120", Location("C:/work/src/engine.py", 120)),
        ("src/engine.py", Location("src/engine.py")),
        ("src/engine.py:abc", Location("src/engine.py:abc")),
        (":12", Location(":12")),
    ],
)
def test_a_sync_place_becomes_a_location(text: str, location: Location) -> None:
    b = bench(sync_count=3, sync_locations=({"location": text, "count": 1},))
    (sync,) = [
        f
        for f in judge_stage("performance", performance(b), POLICY).findings
        if f.kind == "host_sync"
    ]
    assert sync.location == location


def test_an_autocast_mismatch_says_which_dtypes_the_matmuls_used() -> None:
    b = bench(matmul_dtypes={"float32": 9, "bfloat16": 2})
    v = judge_stage("performance", performance(b), POLICY)
    (wrong,) = [f for f in v.findings if f.kind == "autocast_mismatch"]
    assert "bfloat16" in wrong.title and "2 in bfloat16, 9 in float32" in wrong.detail
    assert "autocast" in wrong.fix


@pytest.mark.parametrize(
    ("name", "dtype"),
    [("bf16-mixed", "bfloat16"), ("16-mixed", "float16"), ("32-true", "float32")],
)
def test_the_file_cannot_choose_what_a_precision_computes_in(name: str, dtype: str) -> None:
    """Matmuls in float32 that the file says were expected in float32 are still wrong for a
    16-bit precision: the judge knows what each precision computes in."""
    wrong = "bfloat16" if dtype == "float32" else "float32"
    arm = precision(name, 100.0, matmul_dtypes={wrong: 29}, matmul_dtype_expected=wrong)
    v = judge_stage("performance", performance(with_precisions(bench(), arm)), POLICY)
    assert decide([v]).decision is Decision.BLOCK
    (finding,) = [f for f in v.blocking if f.kind == "autocast_mismatch"]
    assert name in finding.title and dtype in finding.title


@pytest.mark.parametrize("gpu", [True, False])
def test_matmul_dtypes_that_are_absent_are_missing_evidence(gpu: bool) -> None:
    b = bench(gpu=gpu, matmul_dtypes={}, matmul_dtype_expected=None)
    v = judge_stage("performance", performance(b), POLICY)
    assert decide([v]).decision is Decision.BLOCK
    assert any(
        f.kind == "evidence_missing" and "bf16-mixed.health.matmul_dtypes" in f.title
        for f in v.blocking
    ), v.blocking


@pytest.mark.parametrize(
    ("name", "used"),
    [
        ("bf16-mixed", "32-true"),
        ("16-mixed", "bf16-mixed"),
        ("32-tf32", "32-tf32"),
        ("bf16-mixed", None),
    ],
)
def test_a_precision_that_ran_as_another_blocks(name: str, used: str | None) -> None:
    arm = precision(name, 100.0, precision_used=used)
    v = judge_stage("performance", performance(with_precisions(bench(), arm)), POLICY)
    assert decide([v]).decision is Decision.BLOCK
    assert any(f"{name}.precision_used" in f.title for f in v.blocking), v.blocking


def test_a_preset_whose_policy_measures_no_autocast_leaves_dtypes_unjudged() -> None:
    """The policy decides what a preset measures: without autocast, the dtypes are not judged
    (and the stage's note does not claim they were)."""
    presets = dict(POLICY.benchmark.presets)
    spec = presets["cpu-smoke"]
    presets["cpu-smoke"] = replace(
        spec, measures=tuple(m for m in spec.measures if m != "autocast")
    )
    policy = replace(POLICY, benchmark=replace(POLICY.benchmark, presets=presets))
    v = judge_stage("performance", performance(bench(gpu=False, matmul_dtypes={})), policy)
    assert not [f for f in v.findings if "matmul" in f.title or f.kind == "autocast_mismatch"]
    assert "autocast" not in v.note
    clean = judge_stage("performance", performance(bench(gpu=False)), POLICY)
    assert "autocast" in clean.note


def test_every_outcome_carries_its_target_and_its_figure() -> None:
    """A row of the performance table: the policy's target, the judge's figure, and for a
    miss its reason."""
    b = bench(speedup=1.2, window_s=(None, 0.1, 0.1, 0.1, 0.1))  # bf16-mixed's unusable
    v = judge_stage("performance", performance(b), POLICY)
    for check in v.checks:
        assert check.target == str(POLICY.thresholds[check.metric])
        if check.outcome in (CheckOutcome.REPORTED, CheckOutcome.MET, CheckOutcome.MISSED):
            assert check.value is not None
        if check.outcome is CheckOutcome.MISSED:
            assert check.metric in check.why
    assert {c.outcome for c in v.checks} >= {
        CheckOutcome.REPORTED,
        CheckOutcome.MISSED,
        CheckOutcome.NOT_VERIFIED,  # bf16-mixed's speedup: its windows were not verified
    }


def _spread_bf16(speedup: float, spread_pct: float) -> Benchmark:
    """The gpu preset with bf16-mixed ``speedup`` times faster than 32-true, its five windows
    spread evenly ``spread_pct`` % either side of their median."""
    b = bench(speedup=speedup)
    arm = next(p for p in b.precisions if p.name == "bf16-mixed")
    middle = arm.window_s[2]
    assert middle is not None
    k = spread_pct / 200
    windows = tuple(middle * (1 + i * k) for i in (-2, -1, 0, 1, 2))
    return with_precisions(b, replace(arm, window_s=windows))


def _speedup_check(v: StageVerdict) -> MetricCheck:
    return next(
        c
        for c in v.checks
        if c.metric == "speedup"
        and (c.comparison.precision, c.comparison.baseline) == ("bf16-mixed", "32-true")
    )


def test_a_speedup_whose_interval_straddles_its_target_is_not_verified_and_blocks() -> None:
    """Noisy but self-consistent windows: the median clears 1.5x, the interval does not."""
    v = judge_stage("performance", performance(_spread_bf16(1.6, 80.0)), POLICY)
    check = _speedup_check(v)
    low, high = check.comparison.speedup_ci95
    assert low < 1.5 <= 1.6 <= high and check.value == pytest.approx(1.6)
    assert check.outcome is CheckOutcome.NOT_VERIFIED and "interval" in check.why
    assert decide([v]).decision is Decision.BLOCK
    assert [f.kind for f in v.blocking] == ["target_undecided"]


@pytest.mark.parametrize(("speedup", "outcome"), [(4.0, "MET"), (1.1, "MISSED")])
def test_an_interval_on_one_side_of_the_target_decides_it(speedup: float, outcome: str) -> None:
    v = judge_stage("performance", performance(_spread_bf16(speedup, 4.0)), POLICY)
    assert _speedup_check(v).outcome is CheckOutcome[outcome]
    assert not [f for f in v.findings if f.kind == "target_undecided"]


@pytest.mark.parametrize(
    ("name", "setting"),
    [("32-tf32", "highest"), ("32-tf32", None), ("32-true", "high"), ("32-true", "medium")],
)
def test_on_a_gpu_tf32_is_on_for_32_tf32_alone(name: str, setting: str | None) -> None:
    """32-tf32 without TF32 is a second 32-true; 32-true with it is no IEEE fp32 baseline."""
    arm = precision(name, 160.0, float32_matmul_precision=setting)
    v = judge_stage("performance", performance(with_precisions(bench(), arm)), POLICY)
    assert decide([v]).decision is Decision.BLOCK
    assert any(f"{name}.float32_matmul_precision" in f.title for f in v.blocking), v.blocking


def test_on_a_cpu_the_fp32_matmul_setting_is_not_judged() -> None:
    arm = precision("32-true", 400.0, peak_mb=None, float32_matmul_precision=None)
    cpu = with_precisions(bench(gpu=False, speedup=0.7), arm)
    v = judge_stage("performance", performance(cpu), POLICY)
    assert not [f for f in v.findings if "float32_matmul_precision" in f.title]
