"""The benchmark against a stored baseline: the judge picks it and compares, collection never."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from stagegate.collect import collect_stage, read_baselines
from stagegate.judge import decide, judge_stage
from stagegate.judge.baseline import compare_to_baseline as compare_figures
from stagegate.judge.baseline import pick_baseline
from stagegate.judge.derive import figured
from stagegate.model import NOT_VERIFIED, BaselineComparison, Benchmark, Decision, StageData
from stagegate.view.parts import Context
from stagegate.view.summary import summary_view

from ..builders import REPO_POLICY, bench, performance, record, sealed, with_precisions

POLICY = REPO_POLICY


def compare_to_baseline(current: Benchmark, base: Benchmark, margin: float) -> BaselineComparison:
    """Both runs' figures derived from their raw ones, as the judge does, then compared."""
    derived = (figured(b, POLICY.benchmark) for b in (current, base))
    return compare_figures(*derived, margin)


def test_a_regression_beyond_the_noise_is_high() -> None:
    base = bench()
    slower = bench(step_ms={"bf16-mixed": 150.0})
    v = judge_stage("performance", performance(slower), POLICY, baselines=[base])
    regressions = {f.title.split(" ")[1]: f for f in v.findings if f.kind == "regression"}
    assert set(regressions) == {"step_time_ms"}  # bf16 only
    step = regressions["step_time_ms"]
    assert step.severity.blocks and "bf16-mixed" in step.title and "+50.0%" in step.title
    assert v.baseline is not None and v.baseline.comparable


def test_a_change_within_the_margin_is_noise_and_an_improvement_is_info() -> None:
    base = bench(step_ms={"32-true": 600.0})
    noisy = bench(step_ms={"32-true": 645.0})
    assert compare_to_baseline(noisy, base, 10.0).regressions == ()  # +7.5% within 10%
    faster = bench(step_ms={"32-true": 450.0})
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


def test_a_compiled_run_is_compared_with_a_compiled_baseline_only() -> None:
    eager, compiled = bench(), replace(bench(), settings={"compile": True})
    faster = replace(bench(step_ms={"32-true": 300.0}), settings={"compile": True})
    assert pick_baseline(faster, [eager, compiled]) is compiled
    assert pick_baseline(faster, [eager]) is eager  # then reported as not comparable
    cmp = compare_to_baseline(faster, eager, 10.0)
    assert not cmp.comparable and "compilation" in cmp.reason and cmp.changes == ()
    assert compare_to_baseline(faster, compiled, 10.0).improvements


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


# --- a comparison that cannot show a regression is NOT VERIFIED, never a quiet PASS -----------

CTX = Context("2026-01-01 00:00:00 UTC", "0123456789ab", "main", (), "reports/raw")
REQUIRED = POLICY.require(("performance",))


def spread(b: Benchmark, name: str, iqr_pct: float) -> Benchmark:
    """``b`` with ``name``'s five windows spread evenly, their IQR ``iqr_pct`` % of their
    median."""
    arm = next(p for p in b.precisions if p.name == name)
    middle = arm.window_s[2]
    assert middle is not None
    step = iqr_pct / 200
    windows = tuple(middle * (1 + k * step) for k in (-2, -1, 0, 1, 2))
    return with_precisions(b, replace(arm, window_s=windows))


def test_runs_that_spread_beyond_the_margin_are_not_verified_never_within_noise() -> None:
    base = bench()
    slower = spread(bench(step_ms={"bf16-mixed": 130.0}), "bf16-mixed", 40.0)  # +30%
    cmp = compare_to_baseline(slower, base, 10.0)
    bf16 = [c for c in cmp.changes if c.precision == "bf16-mixed" and c.metric != "peak_memory_mb"]
    assert bf16 and {c.verdict for c in bf16} == {NOT_VERIFIED}
    assert cmp.regressions == () and "bf16-mixed" in cmp.not_verified
    quiet = compare_to_baseline(bench(step_ms={"bf16-mixed": 130.0}), base, 10.0)
    assert quiet.regressions and not quiet.not_verified  # the same change, measured quietly


def _unverifiable() -> list[tuple[str, Benchmark, str]]:
    base = bench()
    return [
        ("GPU", replace(bench(), gpu_name="NVIDIA H200"), ""),
        ("torch", replace(bench(), torch="2.99.0"), ""),
        ("bf16-mixed", spread(bench(step_ms={"bf16-mixed": 130.0}), "bf16-mixed", 40.0), ""),
        ("cannot be used", base, "the baseline given cannot be used: not JSON"),
    ]


@pytest.mark.parametrize(("words", "current", "problem"), _unverifiable())
def test_a_comparison_that_cannot_be_made_shows_and_blocks_where_required(
    words: str, current: Benchmark, problem: str
) -> None:
    args = (performance(current), POLICY, [bench()], problem)
    lax = judge_stage("performance", *args)
    assert not lax.blocking, lax.blocking  # the evidence itself is sound

    banners = summary_view(decide([lax]), CTX).banners
    assert any("NOT VERIFIED" in b and words in b for b in banners), banners
    strict = judge_stage("performance", performance(current), REQUIRED, [bench()], problem)
    assert decide([strict]).decision is Decision.BLOCK
    (finding,) = [f for f in strict.blocking if f.kind == "regression_unverified"]
    assert words in finding.detail


def test_a_comparable_quiet_baseline_shows_no_banner() -> None:
    v = judge_stage("performance", performance(bench()), REQUIRED, [bench()])
    assert v.baseline is not None and not v.baseline.not_verified
    assert summary_view(decide([v]), CTX).banners == () and not v.blocking


def _fp32(b: Benchmark, **figures: object) -> Benchmark:
    """``b`` with only 32-true, its figures set by ``figures``."""
    fp32 = next(p for p in b.precisions if p.name == "32-true")
    return replace(b, precisions=(replace(fp32, **figures),))


def _verdicts(current: Benchmark, base: Benchmark, margin: float) -> dict[str, str]:
    """The verdicts on figures set by hand (as if derived)."""
    return {c.metric: c.verdict for c in compare_figures(current, base, margin).changes}


QUIET = {"step_time_ms": 400.0, "peak_mb": 1000.0, "iqr_ms": 0.0}


@pytest.mark.parametrize(
    ("figures", "verdict"),
    [
        ({"step_time_ms": 500.0, "peak_mb": 1250.0}, "within noise"),
        ({"step_time_ms": 300.0, "peak_mb": 750.0}, "within noise"),
        ({"step_time_ms": 501.0, "peak_mb": 1251.0}, "regression"),
        ({"step_time_ms": 299.0, "peak_mb": 749.0}, "improvement"),
    ],
)
def test_a_change_of_exactly_the_margin_is_noise_and_past_it_is_not(
    figures: dict, verdict: str
) -> None:
    base = _fp32(bench(), **QUIET)
    current = _fp32(bench(), **{**QUIET, **figures})
    assert set(_verdicts(current, base, 25.0).values()) == {verdict}


def test_runs_spread_exactly_as_wide_as_the_margin_are_judged() -> None:
    base = _fp32(bench(), **{**QUIET, "iqr_ms": 50.0})  # 12.5% of 400 ms
    current = _fp32(bench(), **{**QUIET, "step_time_ms": 600.0, "iqr_ms": 75.0})  # and of 600
    assert _verdicts(current, base, 25.0)["step_time_ms"] == "regression"
    wider = _fp32(bench(), **{**QUIET, "step_time_ms": 600.0, "iqr_ms": 76.0})
    assert _verdicts(wider, base, 25.0)["step_time_ms"] == NOT_VERIFIED


def test_peak_memory_has_no_window_noise_even_under_a_tiny_margin() -> None:
    base = _fp32(bench(), **{**QUIET, "iqr_ms": 4.0})  # 1% step-time noise
    current = _fp32(bench(), **{**QUIET, "iqr_ms": 4.0, "peak_mb": 1100.0})
    assert _verdicts(current, base, 0.5)["peak_memory_mb"] == "regression"


def test_a_figure_absent_or_zero_on_either_side_is_not_compared() -> None:
    base = _fp32(bench(), **{**QUIET, "iqr_ms": None, "peak_mb": 0.0})
    current = _fp32(bench(), **{**QUIET, "iqr_ms": None, "peak_mb": None})
    assert set(_verdicts(current, base, 10.0)) == {"step_time_ms"}


def test_a_precision_the_baseline_lacks_or_that_failed_is_skipped_not_the_rest() -> None:
    base = bench()
    without_fp32 = replace(
        base, precisions=tuple(p for p in base.precisions if p.name != "32-true")
    )
    names = {c.precision for c in compare_to_baseline(bench(), without_fp32, 10.0).changes}
    assert names == {"32-tf32", "16-mixed", "bf16-mixed"}
    for failed_side in ("current", "baseline"):
        failed = with_precisions(bench(), replace(base.precisions[0], status="failed"))
        current, old = (failed, base) if failed_side == "current" else (base, failed)
        names = {c.precision for c in compare_to_baseline(current, old, 10.0).changes}
        assert "32-true" not in names and "bf16-mixed" in names, failed_side
