"""The pytest plugin's ``--stagegate-guard DIR``: a test that changes the stages' output folder
fails, naming what it changed; the others run as before."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stagegate.record.pytest_guard import changes, snapshot

TESTS = """
    from pathlib import Path

    def test_writes_a_record():
        Path("reports/raw/execution.json").write_text("{}")

    def test_cleans_the_folder():
        for path in Path("reports/raw").glob("junit-*.xml"):
            path.unlink()

    def test_only_reads(tmp_path):
        assert Path("reports/raw/integration.json").read_text()
        (tmp_path / "elsewhere.json").write_text("{}")

    def test_fails_on_its_own():
        assert False
"""


@pytest.mark.slow
def test_a_test_that_touches_the_guarded_folder_fails_naming_what_it_changed(
    tmp_path: Path,
) -> None:
    raw = tmp_path / "reports" / "raw"
    raw.mkdir(parents=True)
    (raw / "integration.json").write_text("{}")
    (raw / "junit-unit.xml").write_text("<testsuites/>")
    (tmp_path / "test_guarded.py").write_text(textwrap.dedent(TESTS))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rA",
            "--stagegate-guard=reports",
            "test_guarded.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout
    assert "ERROR test_guarded.py::test_writes_a_record" in out
    assert "ERROR test_guarded.py::test_cleans_the_folder" in out
    assert "added raw/execution.json" in out and "removed raw/junit-unit.xml" in out
    assert "PASSED test_guarded.py::test_only_reads" in out
    assert "FAILED test_guarded.py::test_fails_on_its_own" in out  # reported once, as itself
    assert "2 errors" in out and "1 failed" in out


@pytest.mark.slow
def test_without_the_option_nothing_is_watched(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "test_free.py").write_text(
        "from pathlib import Path\n\ndef test_w():\n    Path('reports/x').write_text('1')\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_free.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout


def test_changes_are_told_apart(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("1")
    (tmp_path / "b").write_text("1")
    before = snapshot(tmp_path)
    (tmp_path / "a").write_text("22")
    (tmp_path / "b").unlink()
    (tmp_path / "c").write_text("1")
    assert changes(before, snapshot(tmp_path)) == ["changed a", "removed b", "added c"]
    assert snapshot(tmp_path / "absent") == {}
