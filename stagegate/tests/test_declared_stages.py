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


@pytest.mark.slow
def test_a_declared_stage_that_passes_is_judged_under_its_title(project: Path) -> None:
    assert _run_docs(links_ok=True) == 0
    code, verdict = _report()
    assert code == 0 and verdict["decision"] == "PASS"
    assert [s["name"] for s in verdict["stages"]] == ["docs", "spelling"]
    assert _stage(verdict, "docs")["status"] == "PASS"
    assert _stage(verdict, "spelling")["status"] == "NOT VERIFIED"  # declared, not required
    page = Path("reports/docs.md").read_text(encoding="utf-8")
    assert page.startswith("# Documentation Verification Report") and "Stage 1" in page


@pytest.mark.slow
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


# A stage for the slow tests, which the quick stage leaves to it by their mark.
TIERS = """
[tool.stagegate]
required = ["quick"{slow_required}]

[tool.stagegate.stages.quick]
outputs = ["junit"]

[tool.stagegate.stages.slow]
outputs = ["junit"]
marker = "slow"
"""

TIERED_TESTS = """
import pytest

def test_quick():
    assert True

@pytest.mark.slow
def test_slow():
    assert {slow_passes}

@pytest.mark.other
def test_other():
    assert True
"""


def _tiered(tmp_path: Path, slow_required: bool = False, slow_passes: bool = True) -> None:
    (tmp_path / "pyproject.toml").write_text(
        TIERS.format(slow_required=', "slow"' if slow_required else ""), encoding="utf-8"
    )
    (tmp_path / "test_tiers.py").write_text(TIERED_TESTS.format(slow_passes=slow_passes))


PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")


def _run_tier(name: str, marks: str, *options: str) -> int:
    junit = f"reports/raw/junit-{name}.xml"
    pytest_cmd = [*PYTEST, "-m", marks, *options]
    command = [*pytest_cmd, "test_tiers.py", f"--junitxml={junit}"]
    return main(["run", name, "--out-dir", "reports/raw", "--junit", junit, "--", *command])


def _findings(verdict: dict, stage: str) -> list[tuple[str, str]]:
    return [(f["severity"], f["kind"]) for f in _stage(verdict, stage)["findings"]]


@pytest.mark.slow
def test_tests_left_to_a_stage_that_did_not_run_wait_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _tiered(tmp_path)
    assert _run_tier("quick", "not slow and not other") == 0
    code, verdict = _report()
    # test_slow waits for the slow stage, NOT VERIFIED here; test_other runs nowhere
    assert _stage(verdict, "slow")["status"] == "NOT VERIFIED"
    assert "the tests marked slow wait for it" in _stage(verdict, "slow")["note"]
    assert ("INFO", "test_left_to_stage") in _findings(verdict, "quick")
    assert ("HIGH", "test_run_nowhere") in _findings(verdict, "quick")
    assert code == 1
    waiting = next(
        f for f in _stage(verdict, "quick")["findings"] if f["kind"] == "test_left_to_stage"
    )
    assert "test_slow" in waiting["detail"] and "test_other" not in waiting["detail"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("slow_required", "slow_runs", "slow_passes", "decision"),
    [
        (False, False, True, "PASS"),  # waits: NOT VERIFIED, the report says so
        (True, False, True, "BLOCK"),  # required, and it did not run
        (True, True, True, "PASS"),
        (True, True, False, "BLOCK"),  # it ran there, and failed
    ],
)
def test_the_stage_a_mark_names_decides_for_its_tests(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    slow_required: bool,
    slow_runs: bool,
    slow_passes: bool,
    decision: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    _tiered(tmp_path, slow_required, slow_passes)
    assert _run_tier("quick", "not slow") == 0
    if slow_runs:
        _run_tier("slow", "slow")
    code, verdict = _report()
    assert verdict["decision"] == decision and code == (decision == "BLOCK")
    waiting = ("INFO", "test_left_to_stage") in _findings(verdict, "quick")
    assert waiting is not slow_runs
    assert ("HIGH", "test_run_nowhere") not in _findings(verdict, "quick")


@pytest.mark.slow
def test_a_test_the_marked_stage_drops_too_runs_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _tiered(tmp_path, slow_required=True)
    assert _run_tier("quick", "not slow") == 0
    assert _run_tier("slow", "slow and not slow") == 5  # pytest: no tests ran
    code, verdict = _report()
    assert code == 1
    assert ("HIGH", "test_run_nowhere") in _findings(verdict, "quick")
    assert ("INFO", "test_left_to_stage") not in _findings(verdict, "quick")


@pytest.mark.slow
def test_under_xdist_the_marks_the_workers_saw_reach_the_report_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _tiered(tmp_path)
    assert _run_tier("quick", "not slow", "-n", "2") == 0
    code, verdict = _report()
    assert code == 0 and ("INFO", "test_left_to_stage") in _findings(verdict, "quick")
    counts = json.loads(Path("reports/raw/junit-quick.xml.counts.json").read_text())
    assert counts["deselected_marks"] == [["test_tiers", "test_slow", "slow"]]
