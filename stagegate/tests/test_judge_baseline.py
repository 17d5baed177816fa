"""The benchmark against a stored baseline: the judge picks it and compares, collection never."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from stagegate.collect import collect_stage, read_baselines
from stagegate.judge import judge_stage
from stagegate.judge.baseline import compare_to_baseline, pick_baseline
from stagegate.model import StageData
from stagegate.policy import Policy

from .builders import bench, performance, record, sealed

POLICY = Policy()


def test_a_regression_beyond_the_noise_is_high() -> None:
    base = bench()
    slower = bench(step_ms={"bf16-mixed": 150.0})
    v = judge_stage("performance", performance(slower), POLICY, baselines=[base])
    regressions = {f.title.split(" ")[1]: f for f in v.findings if f.kind == "regression"}
    assert set(regressions) == {"step_time_ms", "tokens_per_second"}  # bf16 only
    step = regressions["step_time_ms"]
    assert step.severity.blocks and "bf16-mixed" in step.title and "+50.0%" in step.title
    assert v.baseline is not None and v.baseline.comparable


def test_a_change_within_the_margin_is_noise_and_an_improvement_is_info() -> None:
    base = bench()
    noisy = bench(step_ms={"32-true": 430.0})
    assert compare_to_baseline(noisy, base, 10.0).regressions == ()  # +7.5% within 10%
    faster = bench(step_ms={"32-true": 300.0})
    v = judge_stage("performance", performance(faster), POLICY, baselines=[base])
    assert {f.kind for f in v.findings} == {"improvement"} and not v.blocking


def test_another_gpu_is_not_comparable_and_never_a_regression() -> None:
    base = bench()
    slower = bench(step_ms={"32-true": 900.0, "bf16-mixed": 900.0})
    other = replace(slower, gpu_name="NVIDIA A100-SXM4-80GB")
    cmp = compare_to_baseline(other, base, 10.0)
    assert not cmp.comparable and "GPU" in cmp.reason and cmp.changes == ()
    v = judge_stage("performance", performance(other), POLICY, baselines=[base])
    assert not [f for f in v.findings if f.kind == "regression"]


def test_the_baseline_on_the_same_gpu_and_preset_is_picked() -> None:
    h100, a100 = bench(), replace(bench(), gpu_name="NVIDIA A100-SXM4-80GB")
    assert pick_baseline(h100, [a100, h100]) is h100
    assert pick_baseline(h100, [a100]) is a100  # then reported as not comparable
    assert pick_baseline(h100, []) is None


def test_collection_reads_the_benchmark_and_leaves_the_comparison_to_the_judge(
    tmp_path: Path, fixtures: Path
) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(fixtures / "stagegate" / "block", raw)
    rec = replace(record("performance"), files={"benchmark": str(raw / "benchmark.json")})
    data = collect_stage(sealed(rec, raw), raw)
    assert data.benchmark is not None and "baseline" not in StageData.__dataclass_fields__
    assert judge_stage("performance", data, POLICY).baseline is None  # none given
    baselines = read_baselines(fixtures / "stagegate" / "baseline-h100.json")
    v = judge_stage("performance", data, POLICY, baselines)
    assert v.baseline is not None and v.baseline.comparable and v.baseline.regressions
    assert {f.kind for f in v.findings} >= {"regression"}
