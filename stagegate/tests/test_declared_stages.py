"""A stage the repository declares in its own pyproject.toml, and nowhere in stagegate, is
judged like any other: run for real with ``stagegate run`` and pytest, its passing tests pass,
a failing test blocks even when the command exits 0, and the declared stage that left no record
blocks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from stagegate.cli import main

POLICY = """
[tool.stagegate]
required = ["docs"]

[tool.stagegate.stages.docs]
title = "Documentation"
outputs = ["junit"]

[tool.stagegate.stages.spelling]
title = "Spelling"
"""

TESTS = """
def test_the_guide_builds():
    assert True

def test_every_link_resolves():
    assert {links}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    Path("pyproject.toml").write_text(POLICY, encoding="utf-8")
    return tmp_path


def _run_docs(links_ok: bool, swallow_exit: bool = False) -> int:
    Path("test_docs.py").write_text(TESTS.format(links=links_ok), encoding="utf-8")
    junit = "reports/raw/junit-docs.xml"
    pytest_cmd = (
        f"{sys.executable} -m pytest -q -p no:cacheprovider test_docs.py --junitxml={junit}"
    )
    command = ["sh", "-c", pytest_cmd + ("; exit 0" if swallow_exit else "")]
    return main(["run", "docs", "--out-dir", "reports/raw", "--junit", junit, "--", *command])


def _report() -> tuple[int, dict]:
    code = main(["report", "reports/raw", "--out", "reports", "--pyproject", "pyproject.toml"])
    return code, json.loads(Path("reports/verdict.json").read_text(encoding="utf-8"))


def _stage(verdict: dict, name: str) -> dict:
    return next(s for s in verdict["stages"] if s["name"] == name)


def test_a_declared_stage_that_passes_is_judged_under_its_title(project: Path) -> None:
    assert _run_docs(links_ok=True) == 0
    code, verdict = _report()
    assert code == 0 and verdict["decision"] == "PASS"
    assert [s["name"] for s in verdict["stages"]] == ["docs", "spelling"]
    assert _stage(verdict, "docs")["status"] == "PASS"
    assert _stage(verdict, "spelling")["status"] == "NOT VERIFIED"  # declared, not required
    page = Path("reports/docs.md").read_text(encoding="utf-8")
    assert page.startswith("# Documentation Verification Report") and "Stage 1" in page


def test_a_failing_test_blocks_even_when_the_command_exits_zero(project: Path) -> None:
    assert _run_docs(links_ok=False, swallow_exit=True) == 0
    code, verdict = _report()
    docs = _stage(verdict, "docs")
    assert code == 1 and verdict["decision"] == "BLOCK" and docs["status"] == "FAIL"
    assert [f["kind"] for f in docs["findings"] if f["severity"] != "INFO"] == ["test_failed"]


def test_the_declared_stage_that_left_no_record_blocks(project: Path) -> None:
    assert main(["run", "spelling", "--out-dir", "reports/raw", "--", "true"]) == 0
    code, verdict = _report()
    assert code == 1 and _stage(verdict, "docs")["status"] == "MISSING"
    assert _stage(verdict, "spelling")["status"] == "PASS"


def test_a_declared_output_the_stage_left_out_blocks(project: Path) -> None:
    assert main(["run", "docs", "--out-dir", "reports/raw", "--", "true"]) == 0
    code, verdict = _report()
    kinds = [f["kind"] for f in _stage(verdict, "docs")["findings"]]
    assert code == 1 and "output_missing" in kinds
