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

from .builders import copy_scenario, report_cli, reseal

PY = sys.executable


def test_cli_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    assert report_cli(tmp_path) == 0
    assert report_cli(tmp_path, "--require", "performance") == 1


@pytest.mark.parametrize("baseline", ["absent.json", "broken.json", "empty-dir"])
def test_an_unusable_baseline_is_not_verified_never_a_block_nor_silent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, baseline: str
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "empty-dir").mkdir()
    assert report_cli(tmp_path, "--baseline", str(tmp_path / baseline)) == 0
    summary = (tmp_path / "reports" / "summary.md").read_text()
    banner = summary.split("| Stage |", 1)[0]
    assert "Regression comparison of performance NOT VERIFIED" in banner
    assert baseline.split(".")[0] in banner  # the file it could not use is named


def _verdict(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "reports" / "verdict.json").read_text())


def _kinds(verdict: dict, stage: str) -> set[str]:
    found = [s for s in verdict["stages"] if s["name"] == stage]
    return {f["kind"] for s in found for f in s["findings"]}


@pytest.mark.parametrize(
    ("damage", "stage"),
    [
        (
            lambda raw: (raw / "execution.json").write_text(
                '{"format_version": 1, "kind": "stagegate-rec'
            ),
            "execution",
        ),
        (
            lambda raw: shutil.copy(raw / "execution.json", raw / "execution-copy.json"),
            "execution",
        ),
        (
            lambda raw: (raw / "static.json").write_text(
                json.dumps({**json.loads((raw / "static.json").read_text()), "format_version": 9})
            ),
            "static",
        ),
        (lambda raw: (raw / "integration.json").write_text("[" * 5000 + "]" * 5000), "integration"),
    ],
    ids=["truncated", "two-records", "another-format", "nested-deep"],
)
def test_a_record_that_cannot_be_used_blocks_its_stage_and_replaces_the_earlier_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage, stage: str
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    assert report_cli(tmp_path) == 0
    damage(tmp_path / "reports" / "raw")
    assert report_cli(tmp_path) == 1
    verdict = _verdict(tmp_path)
    assert verdict["decision"] == "BLOCK" and _kinds(verdict, stage) == {"record_unusable"}
    status = {s["name"]: s["status"] for s in verdict["stages"]}
    assert (
        status[stage] == "ERROR"
        and status["static" if stage != "static" else "execution"] == "PASS"
    )
    assert (tmp_path / "reports" / "raw" / "static.json").exists()  # the inputs are kept


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda raw: [p.unlink() for p in raw.glob("*.json")], "no stage records"),
        (lambda raw: shutil.rmtree(raw), "is not a directory"),
    ],
)
def test_a_raw_folder_with_nothing_to_judge_exits_2_with_a_message(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    damage,
    message: str,
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    assert report_cli(tmp_path) == 0
    damage(tmp_path / "reports" / "raw")
    assert report_cli(tmp_path) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "reports" / "verdict.json").exists()  # no earlier verdict to misread


def test_a_bad_policy_value_exits_2_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[tool.stagegate.thresholds]\nspeedup = { op = ">=", value = "fast" }\n')
    assert main(["report", "reports/raw", "--out", "reports", "--pyproject", str(bad)]) == 2
    assert "thresholds.speedup.value" in capsys.readouterr().err
    assert not (tmp_path / "reports" / "summary.md").exists()


def test_a_policy_file_named_and_not_there_exits_2_and_without_one_pyproject_toml_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in --pyproject must not judge by the default policy."""
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    report = ["report", "reports/raw", "--out", "reports"]
    assert main([*report, "--pyproject", "pyprojet.toml"]) == 2
    assert "--pyproject pyprojet.toml" in capsys.readouterr().err
    assert not (tmp_path / "reports" / "summary.md").exists()
    (tmp_path / "pyproject.toml").write_text('[tool.stagegate]\nslow_test_s = "slow"\n')
    assert main(report) == 2  # ./pyproject.toml's policy, read without the option
    assert "slow_test_s" in capsys.readouterr().err


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
            f"ruff={tmp_path / 'r.json'}",
            "--junit",
            str(tmp_path / "j.xml"),
            "--",
            PY,
            "-c",
            "raise SystemExit(5)",
        ]
    )
    assert code == 5
    record = load_record(tmp_path / "static.json")
    assert record.files == {
        "junit": str(tmp_path / "j.xml"),
        "lint": {"ruff": str(tmp_path / "r.json")},
    }
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
        (["run", "Static Stage", "--", "true"], "not a short identifier"),
        (["run", "../up", "--", "true"], "not a short identifier"),
        (["run", "static", "--junit", "/elsewhere/j.xml", "--", "true"], "--out-dir"),
        (["run", "static", "--junit", "reports/raw/../j.xml", "--", "true"], "--out-dir"),
    ],
)
def test_cli_run_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_tests_the_base_branch_ran_and_that_skip_here_are_named_with_their_reasons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixtures: Path
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    base = tmp_path / "base"
    shutil.copytree(fixtures / "stagegate" / "pass-cpu", base)
    junit = tmp_path / "reports" / "raw" / "junit-execution.xml"
    junit.write_text(
        junit.read_text().replace(
            '<testcase classname="test_ok" name="test_two" time="0.010" />',
            '<testcase classname="test_ok" name="test_two" time="0.010">'
            '<skipped message="flaky on shared runners">x</skipped></testcase>',
        )
    )
    reseal(tmp_path / "reports" / "raw")
    assert report_cli(tmp_path, "--base-raw", str(base)) == 1  # it ran there: a block
    execution = (tmp_path / "reports" / "execution.md").read_text()
    assert "skipped share rose from 33.3% to 66.7%" in execution
    assert "1 test(s) that ran on the base branch skip here" in execution
    assert "test\\_ok::test\\_two (flaky on shared runners)" in execution
    assert "| Base branch | 2 passed, 1 skipped |" in execution
    assert report_cli(tmp_path) == 0  # without the base: said, not silently skipped
    assert (
        "not compared: no base branch results given"
        in (tmp_path / "reports" / "execution.md").read_text()
    )
    assert report_cli(tmp_path, "--base-raw", str(tmp_path / "absent")) == 0
    assert (
        "the base branch's results cannot be read"
        in (tmp_path / "reports" / "execution.md").read_text()
    )
