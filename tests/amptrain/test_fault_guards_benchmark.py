"""benchmarks/fault_guards.py: it runs, times the loop's own check and sink, and its ratios are
per-round medians of the guards' time over the step's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fault_guards


def test_fault_guards_runs_and_prints_its_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    ratios = fault_guards.main(["--rounds", "1", "--calls", "20"])
    out = capsys.readouterr().out
    for name in ("step", "check", "flushed", "unflushed", "id check + flushed record / step"):
        assert name in out
    assert 0 < ratios["guards"] < 1 and ratios["flush"] >= 0


def test_the_ratios_are_medians_of_each_rounds_own() -> None:
    samples = {
        "step": [1.0, 2.0, 1.0],
        "check": [0.01, 0.01, 0.03],
        "flushed": [0.01, 0.03, 0.01],
        "unflushed": [0.0, 0.01, 0.0],
    }
    ratios = fault_guards.report(samples)  # rounds: 0.02, 0.02, 0.04 and 0.01, 0.01, 0.01
    assert ratios == pytest.approx({"guards": 0.02, "flush": 0.01})
