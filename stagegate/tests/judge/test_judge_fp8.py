"""An fp8 arm judged: its arithmetic against the GPU's fp8 and bf16 peaks, impossible on a
device without float8 tensor cores (by the compute capability the record observed, or by the
GPU's peak row), its float8 layers stated, emulated only off the GPU, and held to its own
targets against bf16-mixed (speedup on a GPU, accuracy parity anywhere)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stagegate.errors import ConfigError
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import policy_from_mapping
from stagegate.kinds import Kind
from stagegate.model import (
    Benchmark,
    CheckOutcome,
    Decision,
    MetricCheck,
    PrecisionResult,
    StageData,
    StageStatus,
)

from ..builders import (
    PRESET_SPEC,
    REPO_POLICY,
    TOKENS_PER_WINDOW,
    bench,
    cpu_bench,
    gpu_machine,
    performance,
    precision,
    record,
)

POLICY = REPO_POLICY  # its fp8 targets, and the performance stage skippable without CUDA
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def fp8_arm(step_ms: float, *, gpu: bool = True, **kw: object) -> PrecisionResult:
    """An fp8 arm as the benchmark writes it: bf16 autocast around its 8 float8 layers."""
    facts = {"fp8_layers": 8, "fp8_emulated": not gpu, "precision_used": "fp8", **kw}
    arm = precision("bf16-mixed", step_ms, peak_mb=600.0 if gpu else None, **facts)
    return replace(arm, name="fp8")


def with_fp8(b: Benchmark, arm: PrecisionResult) -> Benchmark:
    """``b`` with ``arm`` beside its precisions."""
    return replace(b, precisions=(*b.precisions, arm))


def on(b: Benchmark, gpu_name: str, capability: str | None = None) -> StageData:
    """``b`` as the record of a machine with the GPU ``gpu_name`` observed it."""
    machine = gpu_machine(gpu_name)
    if capability is not None:
        machine["accelerators"]["devices"][0]["compute_capability"] = capability  # type: ignore[index]
    b = replace(b, gpu_name=gpu_name)
    rec = record("performance", commit=b.commit, start=b.datetime, environment=machine)
    return StageData(replace(rec, duration_s=600.0), benchmark=b)


def titles(data: StageData, kind: Kind) -> list[str]:
    verdict = judge_stage("performance", data, POLICY)
    return [f.title for f in verdict.findings if f.kind == kind]


def fp8_checks(data: StageData) -> dict[tuple[str, str], MetricCheck]:
    verdict = judge_stage("performance", data, POLICY)
    return {
        (c.comparison.baseline, c.metric): c
        for c in verdict.checks
        if c.comparison.precision == "fp8"
    }


def test_an_fp8_arm_on_an_h100_is_judged_against_its_fp8_and_its_bf16_peak() -> None:
    b = with_fp8(bench(), fp8_arm(50.0))  # bf16-mixed takes 100 ms a step
    data = performance(b)
    verdict = judge_stage("performance", data, POLICY)
    assert verdict.status is StageStatus.PASS, verdict.findings
    flops = POLICY.benchmark.presets["gpu"].flops_per_token
    tflops = TOKENS_PER_WINDOW / (50.0 * PRESET_SPEC["window_steps"] / 1e3) * flops / 1e12
    shown = {p.name: p for p in verdict.data.benchmark.precisions}  # type: ignore[union-attr]
    assert shown["fp8"].mfu == pytest.approx(tflops / 1979.0)
    assert shown["fp8"].mfu_bf16 == pytest.approx(tflops / 989.5)
    assert shown["fp8"].mfu_bf16 == pytest.approx(2 * shown["fp8"].mfu)
    # twice bf16's speed against twice its peak: the same share of the GPU
    assert shown["fp8"].mfu == pytest.approx(shown["bf16-mixed"].mfu)
    assert shown["bf16-mixed"].mfu_bf16 is None


@pytest.mark.parametrize(("fp8_ms", "outcome"), [(80.0, CheckOutcome.MET),
                                                 (95.0, CheckOutcome.MISSED)])  # fmt: skip
def test_on_a_gpu_fp8_must_beat_bf16_by_its_own_target(
    fp8_ms: float, outcome: CheckOutcome
) -> None:
    data = performance(with_fp8(bench(), fp8_arm(fp8_ms)))
    checks = fp8_checks(data)
    speedup = checks[("bf16-mixed", "speedup")]
    assert speedup.outcome is outcome and speedup.target == ">= 1.1x"
    assert speedup.value == pytest.approx(100.0 / fp8_ms, rel=0.02)
    assert checks[("32-true", "speedup")].outcome is CheckOutcome.REPORTED  # not fp8's target
    passed = decide([judge_stage("performance", data, POLICY)]).decision is Decision.PASS
    assert passed == (outcome is CheckOutcome.MET)


@pytest.mark.parametrize(("fp8_ms", "impossible"), [(50.0, False), (40.0, True), (25.0, True)])
def test_fp8_beyond_twice_bf16_is_impossible_on_an_h100(fp8_ms: float, impossible: bool) -> None:
    # fp8 against bf16-mixed: the fp8/bf16 peak ratio (2x) and half the bytes (2x) bound it,
    # not the fp8/fp32 ratio (29.5x)
    found = titles(on(with_fp8(bench(), fp8_arm(fp8_ms)), H100), Kind.EVIDENCE_IMPOSSIBLE)
    assert bool(found) is impossible, found
    if impossible:
        assert "fp8 vs bf16-mixed" in found[0] and "fp8/bf16 peak ratio 2x" in found[0]


@pytest.mark.parametrize(("capability", "impossible"), [("9.0", False), ("8.9", False),
                                                        ("8.6", True), ("8.0", True)])  # fmt: skip
def test_float8_on_a_gpu_whose_observed_compute_capability_has_none_is_impossible(
    capability: str, impossible: bool
) -> None:
    # the name is an H100's (its peak row has fp8): only the observation tells them apart
    found = titles(on(with_fp8(bench(), fp8_arm(50.0)), H100, capability), Kind.EVIDENCE_IMPOSSIBLE)
    assert bool(found) is impossible, found
    if impossible:
        assert "precisions.fp8" in found[0] and f"observed: {capability}" in found[0]


def test_an_fp8_arm_on_a_gpu_whose_peak_row_has_no_fp8_is_impossible() -> None:
    b = with_fp8(bench(), fp8_arm(50.0))
    assert not titles(on(b, H100), Kind.EVIDENCE_IMPOSSIBLE)
    found = titles(on(b, A100), Kind.EVIDENCE_IMPOSSIBLE)
    assert any("precisions.fp8" in t and "cannot compute in fp8" in t for t in found), found


def test_an_fp8_arm_that_ran_as_bf16_is_inconsistent() -> None:
    b = with_fp8(bench(), fp8_arm(50.0, precision_used="bf16-mixed", fp8_layers=0))
    found = titles(performance(b), Kind.EVIDENCE_INCONSISTENT)
    assert any("precisions.fp8.precision_used" in t for t in found), found


@pytest.mark.parametrize(
    ("facts", "kind", "where"),
    [
        ({"fp8_layers": 0}, Kind.EVIDENCE_INCONSISTENT, "precisions.fp8.fp8_layers"),
        ({"fp8_layers": None}, Kind.EVIDENCE_MISSING, "precisions.fp8.fp8_layers"),
        ({"fp8_emulated": None}, Kind.EVIDENCE_MISSING, "precisions.fp8.fp8_emulated"),
        ({"fp8_emulated": True}, Kind.EVIDENCE_INCONSISTENT, "precisions.fp8.fp8_emulated"),
    ],
)
def test_the_arm_states_its_float8_layers_and_is_never_emulated_on_a_gpu(
    facts: dict[str, object], kind: Kind, where: str
) -> None:
    data = performance(with_fp8(bench(), fp8_arm(50.0, **facts)))
    assert any(where in t for t in titles(data, kind))
    assert decide([judge_stage("performance", data, POLICY)]).decision is Decision.BLOCK


def test_float8_matmuls_not_emulated_on_a_cpu_are_impossible() -> None:
    arm = fp8_arm(900.0, gpu=False, fp8_emulated=False, memory_source="process_rss")
    data = performance(with_fp8(cpu_bench(), replace(arm, sync_method="dispatch")))
    found = titles(data, Kind.EVIDENCE_IMPOSSIBLE)
    assert any("precisions.fp8" in t and "none: no GPU" in t for t in found), found


@pytest.mark.parametrize(("accuracy", "outcome"), [(0.885, CheckOutcome.MET),
                                                   (0.875, CheckOutcome.MISSED)])  # fmt: skip
def test_an_emulated_fp8_arm_on_a_cpu_is_held_to_its_own_accuracy_parity(
    accuracy: float, outcome: CheckOutcome
) -> None:
    arm = fp8_arm(900.0, gpu=False, accuracy=accuracy, memory_source="process_rss")
    data = performance(with_fp8(cpu_bench(), replace(arm, sync_method="dispatch")))
    checks = fp8_checks(data)
    # bf16-mixed's accuracy is 0.899: 0.014 below it is within fp8's 0.02, not the AMP's 0.01
    assert checks[("bf16-mixed", "accuracy_diff")].outcome is outcome
    assert checks[("bf16-mixed", "accuracy_diff")].target == "< 0.02"
    assert checks[("32-true", "accuracy_diff")].outcome is CheckOutcome.REPORTED
    speed = checks[("bf16-mixed", "speedup")]
    assert speed.outcome is CheckOutcome.NOT_VERIFIED and "no GPU" in speed.why
    passed = decide([judge_stage("performance", data, POLICY)]).decision is Decision.PASS
    assert passed == (outcome is CheckOutcome.MET)


def test_a_peak_row_may_leave_out_fp8_and_no_other_dtype() -> None:
    row = {"fp32": 10.0, "tf32": 20.0, "fp16": 40.0, "bf16": 40.0}
    table = {"benchmark": {"peak_tflops": {"X9": row, "X10": {**row, "fp8": 80.0}}}}
    assert policy_from_mapping(table).benchmark.peak_tflops["X9"] == row
    for bad in ({**row, "fp4": 160.0}, {k: v for k, v in row.items() if k != "bf16"}):
        with pytest.raises(ConfigError, match=r"peak_tflops\.X9"):
            policy_from_mapping({"benchmark": {"peak_tflops": {"X9": bad}}})


def test_fp8_targets_are_the_policy_s() -> None:
    policy = policy_from_mapping({"thresholds": {"fp8_speedup": {"op": ">=", "value": 1.3}}})
    assert str(policy.thresholds["fp8_speedup"]) == ">= 1.3x"
    assert str(policy.thresholds["fp8_accuracy_diff"]) == "< 0.02"
