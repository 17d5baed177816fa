"""Collecting what a record names: every file read into typed data, and every one that is
missing or unreadable noted for the judge, never raised and never judged here."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from stagegate.collect import collect_stage, read_baselines
from stagegate.collect import stage as collect_stage_module
from stagegate.errors import InputError

from ..builders import record, sealed


@pytest.fixture
def raw(tmp_path: Path, fixtures: Path) -> Path:
    """A copy of the passing scenario's raw directory."""
    shutil.copytree(fixtures / "stagegate" / "pass-cpu", tmp_path / "raw")
    return tmp_path / "raw"


def test_every_file_a_record_names_is_read(raw: Path) -> None:
    files = {
        "junit": "junit-execution.xml",
        "coverage": "coverage.json",
        "warnings": "warnings-execution.json",
        "metrics": "integration-metrics.json",
        "benchmark": "benchmark.json",
        "lint": {"ruff": "lint-ruff.json", "hadolint": "lint-hadolint.json"},
    }
    data = collect_stage(sealed(record(files=files), raw), raw)  # recorded elsewhere: found in raw
    assert data.suite is not None and data.suite.cases and data.coverage is not None
    assert data.warnings and data.curves is not None and data.benchmark is not None
    assert set(data.lint) == {"ruff", "hadolint"}
    assert data.input_errors == () and data.missing_files == ()


def test_a_missing_file_is_noted_with_its_kind_and_not_judged(raw: Path) -> None:
    files = {"junit": "gone.xml", "metrics": "out/curves.json", "lint": {"ruff": "none.json"}}
    data = collect_stage(sealed(record(files=files), raw), raw)
    assert [(m.kind, m.path) for m in data.missing_files] == [
        ("junit", "gone.xml"),
        ("metrics", "out/curves.json"),
        ("lint", "none.json"),
    ]
    assert all(Path(m.path).name in m.message for m in data.missing_files)
    assert data.input_errors == () and data.suite is None


def test_unreadable_files_and_unknown_kinds_are_input_errors_and_the_rest_is_read(
    raw: Path,
) -> None:
    (raw / "broken.json").write_text("{")
    files = {
        "coverage": "broken.json",
        "logs": "x.txt",
        "lint": {"ruff": "broken.json", "hadolint": "lint-hadolint.json"},
        "junit": "junit-execution.xml",
    }
    data = collect_stage(sealed(record(files=files), raw), raw)
    assert len(data.input_errors) == 3
    assert sum("broken.json" in e for e in data.input_errors) == 2
    assert any("'logs'" in e for e in data.input_errors)
    assert set(data.lint) == {"hadolint"} and data.suite is not None  # one bad file loses no other


def test_a_reader_that_crashes_is_reported_against_its_file(
    raw: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(path: Path) -> None:
        raise ValueError("invalid literal for int()")

    monkeypatch.setitem(collect_stage_module.READERS, "coverage", ("coverage", crash))
    data = collect_stage(sealed(record(files={"coverage": "coverage.json"}), raw), raw)
    (error,) = data.input_errors
    assert "coverage.json" in error and "ValueError" in error and data.coverage is None


def test_baselines_are_read_from_a_file_or_a_directory(raw: Path, fixtures: Path) -> None:
    one = fixtures / "stagegate" / "baseline-h100.json"
    assert [b.gpu_name for b in read_baselines(one)] == ["NVIDIA H100 80GB HBM3"]
    folder = raw / "baselines"
    folder.mkdir()
    shutil.copy(one, folder / "a.json")
    shutil.copy(raw / "benchmark.json", folder / "b.json")
    assert len(read_baselines(folder)) == 2
    with pytest.raises(InputError, match=r"absent\.json"):
        read_baselines(raw / "absent.json")
    empty = raw / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=re.escape(str(empty))):
        read_baselines(empty)


def test_a_record_of_another_stage_is_collected_the_same_way(raw: Path) -> None:
    rec = replace(record("nightly"), files={"junit": "junit-execution.xml"})
    assert collect_stage(sealed(rec, raw), raw).suite is not None
