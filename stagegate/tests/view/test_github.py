"""GitHub outputs: the job summary within its size limit, a sticky comment that fits, and
``::error`` annotations that cannot be split or forged by what they quote."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stagegate.view.github import (
    COMMENT_LIMIT,
    COMMENT_MARKER,
    STEP_SUMMARY_LIMIT,
    annotations,
    comment_body,
)

from ..builders import build_scenario, copy_scenario, junit_file, report_cli


def test_github_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_scenario(tmp_path, "block", monkeypatch)
    summary = tmp_path / "step_summary.md"
    summary.write_text("x" * (STEP_SUMMARY_LIMIT - 2000))  # an earlier step used most of it
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert report_cli(tmp_path, "--github") == 1
    assert summary.stat().st_size <= STEP_SUMMARY_LIMIT
    assert "Summary cut to fit" in summary.read_text()
    comment = (tmp_path / "reports" / "comment.md").read_text()
    assert comment.startswith(COMMENT_MARKER) and len(comment) < COMMENT_LIMIT
    assert "| execution | **FAIL** |" in comment  # no link to execution.md: not in a comment
    assert not re.search(r"\]\((?!https://)", comment)  # every link left resolves anywhere
    errors = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::error ")]
    assert all(re.match(r"::error file=[^,:]+(,line=\d+)?,title=[^:]+::", e) for e in errors)
    assert any(
        e.startswith("::error file=src/trainlib/legacy.py,line=2,title=integration%3A CRITICAL::")
        for e in errors
    )  # the raising line of the integration run
    assert any("%0A" in e for e in errors) and not any("\n" in e for e in errors)


def test_annotations_stop_at_ten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    junit_file(
        tmp_path / "reports" / "raw" / "junit-execution.xml", [f"test_{i}" for i in range(15)]
    )
    verdict, _ = build_scenario("pass-cpu")
    lines = annotations(verdict)
    assert len(lines) == 10 and all("tests/test_x.py,line=3" in line for line in lines)


def test_a_huge_summary_still_fits_a_comment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = comment_body("| a |\n|---|\n" + "| row |\n" * 40000)
    assert len(body) < COMMENT_LIMIT and body.startswith(COMMENT_MARKER) and "cut" in body
