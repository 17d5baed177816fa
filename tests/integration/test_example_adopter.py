"""examples/adopter, a project that is not amptrain, gated by stagegate and nox alone: a copy of
it runs its own `nox -s verify` for real (its stages through `stagegate run`, then `stagegate
report` with its own [tool.stagegate]), and the verdict is read from its verdict.json.

Nothing is installed: nox runs without a virtualenv (--no-venv --no-install) on this
interpreter, whose ruff, pytest and stagegate the stages use.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "examples" / "adopter"

# A docs test that fails (and, for the static stage, an import ruff finds unused).
FAILING_DOCS_TEST = """
import os


def test_the_readme_has_a_second_example():
    assert open("README.md").read().count("```python") == 2
"""
# The plants redefine the noxfile's docs stage: verify looks its stage functions up when it runs.
SWALLOWED_EXIT = """

def run_docs(session):  # noqa: F811 planted: pytest's failure swallowed, exit 0
    junit = f"{RAW}/junit-docs.xml"
    pytest = f"python -m pytest tests/docs --junitxml={junit}; exit 0"
    return stage(session, "docs", [f"--junit={junit}"], "sh", "-c", pytest)
"""
NO_JUNIT = """

def run_docs(session):  # noqa: F811 planted: no JUnit written or declared
    return stage(session, "docs", [], "python", "-m", "pytest", "tests/docs")
"""


def commit(project: Path) -> None:
    """Commit the project's tree as it is: its records name that commit, with nothing
    uncommitted (a plant is a change committed, as a pull request's is)."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(project)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "tree"]):
        subprocess.run([*git, *args], check=True, capture_output=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the example in a git checkout of its own, without anything an earlier run of
    it left there."""
    ignore = shutil.ignore_patterns("reports", ".nox", "__pycache__", ".ruff_cache")
    copy = Path(shutil.copytree(EXAMPLE, tmp_path / "adopter", ignore=ignore))
    commit(copy)
    return copy


def verify(project: Path) -> tuple[int, dict[str, Any]]:
    """The copy's `nox -s verify`: its exit code and the verdict.json it wrote."""
    env = {
        **os.environ,
        # this interpreter's ruff, pytest and stagegate first, as a session's virtualenv would
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        # the example needs no pytest plugin; this environment has many, each a start-up cost.
        # stagegate's is loaded, as where stagegate is installed beside pytest: it witnesses
        # which tests raised
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTEST_PLUGINS": "stagegate.pytest_plugin",
    }
    command = [sys.executable, "-m", "nox", "--no-venv", "--no-install", "-s", "verify"]
    done = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    verdict = project / "reports" / "verdict.json"
    assert verdict.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return done.returncode, json.loads(verdict.read_text(encoding="utf-8"))


def stages(verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in verdict["stages"]}


def kinds(stage: dict[str, Any]) -> list[str]:
    return sorted(f["kind"] for f in stage["findings"])


def test_the_example_as_written_passes_every_stage_it_declares(project: Path) -> None:
    code, verdict = verify(project)
    assert (code, verdict["decision"]) == (0, "PASS")
    judged = stages(verdict)
    assert list(judged) == ["static", "execution", "docs"]  # its own stages, in its order
    assert all(s["status"] == "PASS" and s["required"] for s in judged.values())
    assert all(kinds(s) == [] for s in judged.values())


def test_a_failing_docs_test_blocks_though_the_docs_command_exits_zero(project: Path) -> None:
    (project / "tests" / "docs" / "test_planted.py").write_text(FAILING_DOCS_TEST)
    with (project / "noxfile.py").open("a") as noxfile:
        noxfile.write(SWALLOWED_EXIT)
    commit(project)
    code, verdict = verify(project)
    judged = stages(verdict)
    assert (code, verdict["decision"]) == (1, "BLOCK")
    docs = judged["docs"]
    assert docs["exit_code"] == 0  # the command said it succeeded: the JUnit says otherwise
    assert (docs["status"], kinds(docs)) == ("FAIL", ["test_failed"])
    assert kinds(judged["static"]) == ["lint_style"]  # ruff's F401, read from its JSON
    assert judged["execution"]["status"] == "PASS"


def test_a_docs_stage_that_leaves_out_its_declared_junit_blocks(project: Path) -> None:
    with (project / "noxfile.py").open("a") as noxfile:
        noxfile.write(NO_JUNIT)
    commit(project)
    code, verdict = verify(project)
    judged = stages(verdict)
    assert (code, verdict["decision"]) == (1, "BLOCK")
    docs = judged["docs"]
    assert docs["exit_code"] == 0  # its tests passed; the policy's declared file is missing
    assert "output_missing" in kinds(docs)
    assert all(judged[name]["status"] == "PASS" for name in ("static", "execution"))
