"""A pass-cpu run tampered with after its stages: each change that could read as a PASS (a
record removed, records of another commit, a stage named after a report file, a refused input
over an old report) blocks or is refused, and names what it found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .builders import copy_scenario, report_cli

RAW = Path("reports/raw")


def _verdict() -> dict:
    return json.loads(Path("reports/verdict.json").read_text(encoding="utf-8"))


def _status(stage: str) -> str:
    return next(s["status"] for s in _verdict()["stages"] if s["name"] == stage)


def _log_run(stage: str, start: str = "2026-01-01T00:00:00Z") -> None:
    """A line of the run log, as stagegate run writes it when the stage ends."""
    with (RAW / "stagegate-runs.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"stage": stage, "start": start, "record": f"{stage}.json"}) + "\n")


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pass-cpu scenario in ``tmp_path``, every stage in the run log; it passes as it is."""
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    for stage in ("static", "execution", "integration", "performance"):
        _log_run(stage)
    assert report_cli(tmp_path) == 0
    return tmp_path


def test_a_performance_record_removed_after_its_run_blocks_as_removed(run: Path) -> None:
    (RAW / "performance.json").unlink()
    assert report_cli(run) == 1
    assert _status("performance") == "MISSING"
    summary = Path("reports/summary.md").read_text(encoding="utf-8")
    assert "performance's record was removed" in summary
    assert "allowed to be skipped" not in summary


def test_a_performance_stage_that_never_ran_blocks_on_a_cpu_too(run: Path) -> None:
    (RAW / "performance.json").unlink()
    (RAW / "stagegate-runs.jsonl").unlink()
    assert report_cli(run) == 1 and _status("performance") == "MISSING"
    assert "did not run" in Path("reports/performance.md").read_text(encoding="utf-8")
