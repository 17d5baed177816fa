"""The CI files under the real linters: zizmor, actionlint, check-jsonschema, hadolint."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

spec = importlib.util.spec_from_file_location("static_checks", ROOT / "tools" / "static_checks.py")
static_checks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(static_checks)  # type: ignore[union-attr]
WORKFLOWS = [str(ROOT / p) for p in static_checks.WORKFLOWS]  # the examples' too


def _tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: install the project's lint extra")
    return str(path)


@pytest.mark.parametrize("persona", ["regular", "pedantic", "auditor"])
def test_zizmor_finds_nothing_under_any_persona(persona: str) -> None:
    # Every remaining finding is ignored where it stands, with the reason beside it.
    out = subprocess.run(
        [
            _tool("zizmor"),
            "--offline",
            "--no-exit-codes",
            "--format",
            "json",
            "--persona",
            persona,
            *WORKFLOWS,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    findings = json.loads(out.stdout)
    assert findings == [], [f["ident"] for f in findings]


def test_every_zizmor_ignore_says_why() -> None:
    for path in WORKFLOWS:
        for line in Path(path).read_text().splitlines():
            if "zizmor: ignore[" in line:
                reason = line.split("]", 1)[1].strip()
                assert len(reason) > 20, line


@pytest.mark.slow
def test_shellcheck_is_clean_on_every_run_script() -> None:
    assert static_checks.shellcheck() == []


def test_shellcheck_reports_a_planted_fault_at_its_workflow_line(tmp_path: Path) -> None:
    wf = tmp_path / "w.yml"
    wf.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: |\n          echo ok\n          cd $HOME/x\n"
    )
    previous, static_checks.WORKFLOWS = static_checks.WORKFLOWS, [str(wf)]
    try:
        found = static_checks.shellcheck()
    finally:
        static_checks.WORKFLOWS = previous
    assert [(f["code"], f["line"]) for f in found] == [("SC2086", 8)]


@pytest.mark.slow
def test_dependabot_config_matches_its_schema() -> None:
    assert static_checks.check_jsonschema()["errors"] == []


@pytest.mark.slow
def test_workflows_match_githubs_workflow_schema() -> None:
    out = subprocess.run(
        [
            _tool("check-jsonschema"),
            "--builtin-schema",
            "vendor.github-workflows",
            "--output-format",
            "json",
            *WORKFLOWS,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert json.loads(out.stdout)["status"] == "ok", out.stdout


def test_hadolint_is_clean_on_the_dockerfile() -> None:
    out = subprocess.run(
        [_tool("hadolint"), "-f", "json", "Dockerfile"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert json.loads(out.stdout) == []


@pytest.mark.slow
def test_a_tool_that_cannot_run_fails_the_stage_and_the_others_still_write_their_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    found = static_checks._bin
    monkeypatch.setattr(
        static_checks,
        "_bin",
        lambda name: str(tmp_path / "gone") if name == "hadolint" else found(name),
    )
    monkeypatch.setattr(static_checks, "imports", lambda: [])  # every module imported: slow
    monkeypatch.setattr(sys, "argv", ["static_checks.py", "--out", str(tmp_path / "lint")])
    assert static_checks.main() == 1
    written = sorted(p.name for p in (tmp_path / "lint").iterdir())
    assert written == [
        "check-jsonschema.json", "imports.json", "ruff.json", "shellcheck.json", "zizmor.json",
    ]  # fmt: skip
    out, err = capsys.readouterr()
    assert "could not run hadolint" in err and out.index("ruff:") < out.index("shellcheck:")
