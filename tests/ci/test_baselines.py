"""The committed GPU baselines: each one is a whole benchmark of the gpu preset on a named GPU,
from a clean commit, that the gate can read and compare with, and that holds the preset's
promise (a bf16-vs-fp32 speedup interval no wider than 3% either side)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from amptrain.benchmark.presets import PRESETS
from stagegate.collect.benchmark import read_benchmark
from stagegate.judge.baseline import compare_to_baseline

BASELINES = Path(__file__).resolve().parents[2] / "reports" / "baseline"
SCHEMA = json.loads(
    resources.files("amptrain.benchmark").joinpath("benchmark.schema.json").read_text()
)
FILES = sorted(BASELINES.glob("*.json"))


def test_there_is_a_baseline() -> None:
    assert FILES, f"no benchmark JSON in {BASELINES}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_a_baseline_is_a_clean_gpu_run_of_the_gpu_preset(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.validate(doc, SCHEMA)
    machine = doc["machine_info"]
    for key in ("gpu_name", "driver", "torch", "cuda"):
        assert machine[key], f"{path.name} does not name its {key}"
    assert doc["gpu_verified"] and doc["device"] == "cuda"
    assert doc["preset"] == PRESETS["gpu"].to_dict(), "measured with another gpu preset"
    assert doc["commit_info"]["id"] and doc["commit_info"]["dirty"] is False
    assert all(r["status"] == "ok" for r in doc["precisions"].values())
    assert set(doc["precisions"]) == set(PRESETS["gpu"].precisions)
    slug = machine["gpu_name"].removeprefix("NVIDIA ").lower().replace(" ", "-")
    assert path.name == f"benchmark-{slug}.json"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_the_gate_reads_a_baseline_and_finds_it_comparable_with_itself(path: Path) -> None:
    bench = read_benchmark(path)
    cmp = compare_to_baseline(bench, bench, margin_pct=10.0)
    assert cmp.comparable and not cmp.regressions
    bf16 = next(
        c for c in bench.comparisons if (c.precision, c.baseline) == ("bf16-mixed", "32-true")
    )
    low, high = bf16.speedup_ci95
    assert (high - low) / 2 <= 0.03 * bf16.speedup
