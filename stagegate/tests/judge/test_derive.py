"""The figures the judge derives, held against the same arithmetic done here by hand on the raw
samples of the committed H100 baseline, a format 1 file: its summaries are never read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stagegate.collect.benchmark import read_benchmark
from stagegate.judge.derive import figured
from stagegate.judge.policy import Policy

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
