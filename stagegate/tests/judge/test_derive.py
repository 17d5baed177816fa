"""The figures the judge derives, held against the same arithmetic done here by hand on the raw
samples of the committed H100 baseline, a format 1 file: its summaries are never read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stagegate.collect.benchmark import read_benchmark
from stagegate.judge.derive import figured, health
from stagegate.judge.policy import Policy
from stagegate.model import PrecisionResult

from ..builders import FIXTURES

H100 = FIXTURES / "benchmark-h100-80gb-hbm3.json"  # a copy of reports/baseline's
RAW = json.loads(H100.read_text())
POLICY = Policy().benchmark
PEAK = {"32-true": 67.0, "32-tf32": 494.5, "16-mixed": 989.5, "bf16-mixed": 989.5}  # TFLOP/s


def _median(values: list[float]) -> float:
    ordered, n = sorted(values), len(values)
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2 if n % 2 == 0 else ordered[n // 2]


def test_the_committed_h100_baseline_is_format_1_with_summaries_beside_its_windows() -> None:
    assert RAW["format_version"] == 1 and RAW["comparisons"]
    assert all("step_time_ms" in r and "stats" in r for r in RAW["precisions"].values())


def test_its_figures_are_derived_from_its_windows_and_memory() -> None:
    bench = figured(read_benchmark(H100), POLICY)
    tokens_per_step = RAW["preset"]["batch_size"] * RAW["preset"]["seq_len"]
    flops = POLICY.presets["gpu"].flops_per_token
    assert flops is not None
    for name, raw in RAW["precisions"].items():
        p = bench.precision(name)
        assert p is not None
        mid, steps = _median(raw["window_s"]), raw["steps_per_window"]
        assert p.step_time_ms == pytest.approx(mid / steps * 1e3, rel=1e-12)
        assert p.tokens_per_second == pytest.approx(steps * tokens_per_step / mid, rel=1e-12)
        memory = raw["memory"]
        assert p.activation_mb == pytest.approx(memory["peak_allocated_mb"] - memory["static_mb"])
        tflops = steps * tokens_per_step / mid * flops / 1e12
        assert p.mfu == pytest.approx(tflops / PEAK[name], rel=1e-12)


def test_its_summaries_are_ignored_even_when_wrong(tmp_path: Path) -> None:
    doc = json.loads(H100.read_text())
    for raw in doc["precisions"].values():
        raw.update(step_time_ms=1.0, tokens_per_second=1.0, mfu=0.5)
        raw["stats"]["median"] = 1.0
        raw["memory"]["activation_mb"] = 1.0
    doc["comparisons"] = []
    wrong = tmp_path / H100.name
    wrong.write_text(json.dumps(doc))
    assert figured(read_benchmark(wrong), POLICY) == figured(read_benchmark(H100), POLICY)


# --- health: slopes, shares, rates and percentiles of the samples --------------------------------


def test_health_figures_are_derived_from_the_samples_as_amptrain_defined_them() -> None:
    """Each figure against the arithmetic done by hand: a least-squares slope over the window
    index, a percent of the start, a share, a rate, percentiles interpolated linearly."""
    p = PrecisionResult(
        "bf16-mixed",
        "ok",
        None,
        "bf16-mixed",
        memory_change_mb=(1.0, 0.0, 4.0),  # x 0,1,2 around 1; y around 5/3: 3 / 2
        live_bytes_change=(0.0, 5.0, 10.0, 15.0),  # 5 bytes a window of the 1000 at the start
        live_start_bytes=1000.0,
        data_wait_s=0.25,
        timed_host_s=2.0,
        sync_count=6,
        sync_steps=3,
        latency_samples_ms=(10.0, 1.0, 4.0, 3.0, 2.0),  # sorted 1 2 3 4 10: p95 at 3.8 -> 8.8
    )
    assert health(p) == {
        "memory_growth_mb_per_window": 1.5,
        "live_growth_pct_per_window": 0.5,
        "data_wait_share": 0.125,
        "syncs_per_step": 2.0,
        "latency_p50_ms": 3.0,
        "latency_p95_ms": pytest.approx(8.8, rel=1e-12),
    }
    one = PrecisionResult("x", "ok", None, None, memory_change_mb=(3.0,), latency_samples_ms=(7.0,))
    assert health(one)["memory_growth_mb_per_window"] == 0.0  # one window: no slope (amptrain's)
    assert health(one)["latency_p95_ms"] == 7.0


@pytest.mark.parametrize(
    "raw",
    [
        {"memory_change_mb": ()},
        {"memory_change_mb": (0.0, None, 1.0)},
        {"live_start_bytes": 0.0},
        {"live_start_bytes": None},
        {"timed_host_s": 0.0},
        {"sync_steps": 0},
        {"sync_count": None},
        {"latency_samples_ms": (1.0, None)},
    ],
)
def test_a_health_figure_whose_samples_are_absent_or_broken_is_none(raw: dict) -> None:
    whole = dict(
        memory_change_mb=(0.0, 1.0),
        live_bytes_change=(0.0, 1.0),
        live_start_bytes=10.0,
        data_wait_s=0.1,
        timed_host_s=1.0,
        sync_count=0,
        sync_steps=3,
        latency_samples_ms=(1.0, 2.0),
    )
    figures = health(PrecisionResult("x", "ok", None, None, **{**whole, **raw}))
    assert sum(v is None for v in figures.values()) in (1, 2)  # the latency's two percentiles
    clean = health(PrecisionResult("x", "ok", None, None, **whole))
    assert all(v is not None for v in clean.values())


def test_a_format_1_files_health_is_derived_from_its_samples_as_its_summaries_said() -> None:
    """The baseline's own summaries, computed by amptrain with numpy when it was written, are
    what the judge now derives from the samples beside them (and never reads); it holds no
    data-wait seconds, so that share is absent, and its syncs were counted over 3 steps."""
    bench = figured(read_benchmark(H100), POLICY)
    for p in bench.precisions:
        said = RAW["precisions"][p.name]["health"]
        assert p.memory_growth_mb_per_window == pytest.approx(
            said["memory_growth_mb_per_window"], rel=1e-9, abs=1e-12
        )
        assert p.live_growth_pct_per_window == pytest.approx(
            said["live_tensors"]["growth_pct_per_window"], rel=1e-9
        )
        assert p.syncs_per_step == said["syncs_in_step"]["per_step"] == 0.0
        assert p.sync_steps == 3
        latency = said["inference_latency_ms"]
        assert (p.latency_p50_ms, p.latency_p95_ms) == pytest.approx(
            (latency["p50"], latency["p95"]), rel=1e-12
        )
        assert p.data_wait_share is None and said["data_wait_share"] is not None
