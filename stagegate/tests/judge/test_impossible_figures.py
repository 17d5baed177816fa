"""Figures no run can produce, planted in a passing run's files: a record's duration or start,
a coverage percent, a warning count. Each is refused naming the field, never judged."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ..builders import copy_scenario, report_cli, reseal

RAW = Path("reports/raw")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return copy_scenario(tmp_path, "pass-cpu", monkeypatch)


def _edit(name: str, change: Any) -> None:
    path = RAW / name
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")  # NaN and Infinity as Python writes them


def _execution(verdict: dict) -> dict:
    return next(s for s in verdict["stages"] if s["name"] == "execution")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("duration_s", -1.0),
        ("duration_s", 1e9),
        ("duration_s", math.nan),
        ("duration_s", math.inf),
        ("start", "yesterday"),
        ("start", "2026-13-40T00:00:00Z"),
    ],
)
def test_an_impossible_record_time_blocks_its_stage_naming_it(
    root: Path, field: str, value: object
) -> None:
    assert report_cli(root) == 0
    _edit("execution.json", lambda d: d.update({field: value}))
    assert report_cli(root) == 1
    stage = _execution(json.loads(Path("reports/verdict.json").read_text(encoding="utf-8")))
    (finding,) = stage["findings"]
    assert stage["status"] == "ERROR" and finding["kind"] == "record_unusable"
    # a NaN or infinity is not JSON: refused where the file holds it
    assert "execution.json" in finding["detail"] and f"{field}" in finding["detail"]


@pytest.mark.parametrize("percent", [250.0, -5.0, 100.5, math.nan, math.inf])
@pytest.mark.parametrize("where", ["totals", "file"])
def test_an_impossible_coverage_percent_blocks_naming_it(
    root: Path, percent: float, where: str
) -> None:
    def plant(d: dict) -> None:
        target = d["totals"] if where == "totals" else next(iter(d["files"].values()))["summary"]
        target["percent_covered"] = percent

    _edit("coverage.json", plant)
    reseal(RAW)  # as if the stage wrote it
    assert report_cli(root) == 1
    stage = _execution(json.loads(Path("reports/verdict.json").read_text(encoding="utf-8")))
    assert stage["status"] == "ERROR"
    assert any("percent_covered" in f["title"] for f in stage["findings"])


@pytest.mark.parametrize("count", [-3, 0, 2.5, True, "7"])
def test_an_impossible_warning_count_blocks_naming_it(root: Path, count: object) -> None:
    _edit("warnings-execution.json", lambda d: d["warnings"][0].update({"count": count}))
    reseal(RAW)
    assert report_cli(root) == 1
    stage = _execution(json.loads(Path("reports/verdict.json").read_text(encoding="utf-8")))
    assert stage["status"] == "ERROR"
    assert any("entry 0 count" in f["title"] for f in stage["findings"])


def _stage(name: str) -> dict:
    verdict = json.loads(Path("reports/verdict.json").read_text(encoding="utf-8"))
    return next(s for s in verdict["stages"] if s["name"] == name)


@pytest.mark.parametrize(
    ("window_s", "field"),
    [
        (1e-9, "precisions.32-true.window_s"),  # petaFLOP/s from the two cores the record saw
        (5e-324, "precisions.32-true.window_s"),
        (1e308, "benchmark file times"),  # together longer than the stage: inf, not a crash
    ],
)
def test_cpu_windows_no_machine_can_time_block_as_impossible(
    root: Path, window_s: float, field: str
) -> None:
    def plant(d: dict) -> None:
        for p in d["precisions"].values():
            p["window_s"] = [window_s] * len(p["window_s"])

    _edit("benchmark.json", plant)
    reseal(RAW)
    assert report_cli(root) == 1
    impossible = [
        f for f in _stage("performance")["findings"] if f["kind"] == "evidence_impossible"
    ]
    assert any(field in f["title"] for f in impossible), impossible


def test_a_loss_curve_shorter_than_the_steps_timed_blocks(root: Path) -> None:
    # half the losses: the steps the windows claim were not all trained
    _edit("benchmark.json", lambda d: d["precisions"]["bf16-mixed"].update(
        loss_curve=d["precisions"]["bf16-mixed"]["loss_curve"][::2]))  # fmt: skip
    reseal(RAW)
    assert report_cli(root) == 1
    (found,) = [f for f in _stage("performance")["findings"] if f["kind"] != "slow_test"]
    assert found["kind"] == "evidence_inconsistent" and "bf16-mixed.loss_curve" in found["title"]
