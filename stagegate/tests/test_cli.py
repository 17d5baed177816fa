"""The command line: exit 0 for PASS, 1 for BLOCK, 2 for input it cannot use (saying what is
wrong and leaving earlier reports alone), 3 for a bug in stagegate; ``run``'s own options."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from stagegate.cli import main
from stagegate.collect import load_record

from .builders import copy_scenario, report_cli

PY = sys.executable


def test_cli_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    assert report_cli(tmp_path) == 0
    assert report_cli(tmp_path, "--require", "performance") == 1
    assert report_cli(tmp_path, "--baseline", str(tmp_path / "absent.json")) == 2


def test_broken_record_exits_2_and_leaves_earlier_reports_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    assert report_cli(tmp_path) == 0
    before = (tmp_path / "reports" / "summary.md").read_text()
    (tmp_path / "reports" / "raw" / "execution.json").write_text(
        '{"format_version": 1, "kind": "stagegate-rec'
    )
    assert report_cli(tmp_path) == 2
    assert "execution.json is not valid JSON" in capsys.readouterr().err
    assert (tmp_path / "reports" / "summary.md").read_text() == before


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda raw: shutil.copy(raw / "execution.json", raw / "execution-copy.json"),
            "two records",
        ),
        (lambda raw: [p.unlink() for p in raw.glob("*.json")], "no stage records"),
        (
            lambda raw: (raw / "static.json").write_text(
                json.dumps({**json.loads((raw / "static.json").read_text()), "format_version": 9})
            ),
            "format_version 9",
        ),
        (lambda raw: shutil.rmtree(raw), "is not a directory"),
    ],
)
def test_unusable_input_exits_2_with_a_message(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    damage,
    message: str,
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    damage(tmp_path / "reports" / "raw")
    assert report_cli(tmp_path) == 2
    assert message in capsys.readouterr().err


def test_a_bad_policy_value_exits_2_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[tool.stagegate.thresholds]\nspeedup = { op = ">=", value = "fast" }\n')
    assert main(["report", "reports/raw", "--out", "reports", "--pyproject", str(bad)]) == 2
    assert "thresholds.speedup.value" in capsys.readouterr().err
    assert not (tmp_path / "reports" / "summary.md").exists()


def test_an_internal_error_exits_3_never_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug in a view")

    monkeypatch.setattr("stagegate.report.summary_view", broken)
    assert report_cli(tmp_path) == 3
    assert "internal error" in capsys.readouterr().err


def test_cli_run_passes_files_and_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "run",
            "static",
            "--out-dir",
            str(tmp_path),
            "--lint",
            "ruff=r.json",
            "--junit",
            "j.xml",
            "--",
            PY,
            "-c",
            "raise SystemExit(5)",
        ]
    )
    assert code == 5
    record = load_record(tmp_path / "static.json")
    assert record.files == {"junit": "j.xml", "lint": {"ruff": "r.json"}}
    assert record.command[-1] == "raise SystemExit(5)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [
                "run",
                "static",
                "--",
            ],
            "no command given",
        ),
        (["run", "static", "--lint", "ruff", "--", "true"], "write TOOL=FILE"),
        (["run", "static", "--lint", "pylint=x.json", "--", "true"], "unknown tool"),
    ],
)
def test_cli_run_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
