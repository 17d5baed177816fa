"""stagegate.yml, the reusable gate for other repositories, and the example's two callers of
it (examples/adopter/.github/workflows): which job each event runs, what each job may do, and
the judge's and the status's shell scripts run here with stand-ins for stagegate and gh."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .ci_tools import ROOT, WORKFLOWS, load_workflow, this_stagegate
from .gha_expressions import job_runs

DOC = load_workflow("stagegate.yml")
JOBS = DOC["jobs"]
EXAMPLE = ROOT / "examples" / "adopter" / ".github" / "workflows"
CALLED = re.compile(r"^([\w.-]+)/([\w.-]+)/\.github/workflows/stagegate\.yml@([0-9a-f]{40})$")


def _caller(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLE / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def _step(job: str, words: str) -> dict[str, Any]:
    (step,) = [s for s in JOBS[job]["steps"] if words in s.get("run", "")]
    return step


def _uses(job: str, action: str) -> list[dict[str, Any]]:
    return [s for s in JOBS[job]["steps"] if s.get("uses", "").startswith(f"actions/{action}@")]


def test_it_is_only_a_reusable_workflow_and_names_the_stagegate_it_installs() -> None:
    assert set(DOC["on"]) == {"workflow_call"}
    inputs = DOC["on"]["workflow_call"]["inputs"]
    assert inputs["stagegate-repository"]["required"] and inputs["stagegate-ref"]["required"]
    for job in ("stages", "judge"):
        (gate,) = [s for s in _uses(job, "checkout") if s["with"].get("path") == "gate"]
        assert gate["with"]["repository"] == "${{ inputs.stagegate-repository }}"
        assert gate["with"]["ref"] == "${{ inputs.stagegate-ref }}"
        # its hash-pinned tools, as this repository's own hosts install them
        assert _step(job, "gate_env.sh")["run"].startswith('gate/tools/ci/gate_env.sh "$RUNNER_')


@pytest.mark.parametrize(
    ("event", "running"),
    [
        ("pull_request", {"stages"}),
        ("push", {"stages"}),
        ("workflow_run", {"judge", "report"}),
    ],
)
def test_the_callers_event_alone_decides_which_jobs_run(event: str, running: set[str]) -> None:
    ran: dict[str, bool] = {}
    for name, job in JOBS.items():  # listed after the jobs they need
        ok = all(ran[n] for n in job.get("needs", []))
        ran[name] = job_runs(job.get("if"), {"github": {"event_name": event}}, ok)
    assert {name for name, runs in ran.items() if runs} == running
    # the status is set even when the judge failed or was cancelled
    assert job_runs(JOBS["report"]["if"], {"github": {"event_name": event}}, False) == (
        event == "workflow_run"
    )


def test_the_job_that_runs_the_change_holds_a_read_only_token_and_no_secret() -> None:
    stages = JOBS["stages"]
    assert stages["permissions"] == {"contents": "read"} and "environment" not in stages
    assert "secrets." not in yaml.safe_dump(stages)
    upload = _uses("stages", "upload-artifact")[0]
    assert upload["if"] == "always()"  # a failed stage's record is what blocks
    assert upload["with"]["path"] == "project/${{ inputs.raw }}"
    # only the job in the environment of the App's key holds it, and it runs no checkout
    holders = [n for n, j in JOBS.items() if "secrets." in yaml.safe_dump(j)]
    assert holders == ["report"] and JOBS["report"]["environment"] == "gate"
    assert not _uses("report", "checkout") and JOBS["report"]["permissions"] == {}


def test_the_judge_reads_the_completed_runs_records_with_the_default_branchs_policy() -> None:
    upload = _uses("stages", "upload-artifact")[0]
    (download,) = _uses("judge", "download-artifact")
    assert download["with"]["name"] == upload["with"]["name"]
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    assert download["with"]["path"] == "${{ runner.temp }}/judge/${{ inputs.raw }}"
    (project,) = [s for s in _uses("judge", "checkout") if s["with"].get("path") == "project"]
    assert "ref" not in project["with"]  # on workflow_run: the default branch
    judge = _step("judge", "stagegate")
    assert 'policy="$PWD/project/pyproject.toml"' in judge["run"]
    assert ' report "$RAW" --out reports --pyproject "$policy"' in judge["run"]
    (reports,) = _uses("judge", "upload-artifact")
    assert reports["if"] == "always()"
    assert reports["with"]["path"] == "${{ runner.temp }}/judge/reports"


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # as GitHub runs a step with no shell named, the expressions in env: already substituted
    return subprocess.run(
        ["bash", "-e", "-c", script], cwd=cwd, env={**os.environ, **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@pytest.mark.parametrize(
    ("code", "state"), [(0, "success"), (1, "failure"), (2, "error"), (127, "error")]
)
def test_stagegates_exit_code_becomes_the_state(tmp_path: Path, code: int, state: str) -> None:
    temp = tmp_path / "temp"
    _executable(temp / "gate" / "bin" / "stagegate", f"#!/bin/sh\nexit {code}\n")
    (tmp_path / "GITHUB_OUTPUT").touch()
    env = {"RUNNER_TEMP": str(temp), "RAW": "reports/raw"}
    env["GITHUB_OUTPUT"] = str(tmp_path / "GITHUB_OUTPUT")
    done = _bash(_step("judge", "stagegate")["run"], tmp_path, env)
    assert done.returncode == 0, done.stderr  # the status job reports; this one only decides
    assert _outputs(tmp_path / "GITHUB_OUTPUT")["state"] == state


@pytest.mark.slow
def test_the_judge_passes_real_records_with_the_policy_it_is_given(tmp_path: Path) -> None:
    fixture = ROOT / "stagegate" / "tests" / "fixtures" / "stagegate" / "pass-cpu"
    shutil.copytree(fixture, tmp_path / "temp" / "judge" / "reports" / "raw")
    (tmp_path / "project").mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "project" / "pyproject.toml")
    stagegate = f'#!/bin/sh\nexec "{sys.executable}" -m stagegate "$@"\n'
    _executable(tmp_path / "temp" / "gate" / "bin" / "stagegate", stagegate)
    (tmp_path / "GITHUB_OUTPUT").touch()
    env = {"RUNNER_TEMP": str(tmp_path / "temp"), "RAW": "reports/raw"}
    env |= {"GITHUB_OUTPUT": str(tmp_path / "GITHUB_OUTPUT"), "GITHUB_STEP_SUMMARY": os.devnull}
    env["PYTHONPATH"] = this_stagegate()  # this checkout's, whatever the interpreter installed
    done = _bash(_step("judge", "stagegate")["run"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert _outputs(tmp_path / "GITHUB_OUTPUT")["state"] == "success", done.stdout[-2000:]
    assert (tmp_path / "temp" / "judge" / "reports" / "summary.md").is_file()  # uploaded


@pytest.mark.parametrize(
    ("judge", "state", "posted", "code"),
    [
        ("success", "success", "success", 0),
        ("success", "failure", "failure", 1),
        ("failure", "", "error", 1),  # the judge failed before it decided
        ("cancelled", "success", "error", 1),  # no state of an unfinished judge counts
    ],
)
def test_the_status_is_success_only_for_a_finished_judges_pass(
    tmp_path: Path, judge: str, state: str, posted: str, code: int
) -> None:
    log = tmp_path / "gh.log"
    _executable(tmp_path / "bin" / "gh", f'#!/bin/sh\nprintf "%s\\n" "$@" > "{log}"\n')
    env = {
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "GH_TOKEN": "t", "SHA": "a" * 40, "CONTEXT": "verification report", "JUDGE": judge,
        "STATE": state, "DESCRIPTION": "d", "TARGET": "u", "GITHUB_REPOSITORY": "o/r",
    }  # fmt: skip
    done = _bash(_step("report", "gh api")["run"], tmp_path, env)
    assert done.returncode == code, done.stderr
    args = log.read_text().splitlines()
    assert args[:3] == ["api", "--method", "POST"] and args[3] == f"repos/o/r/statuses/{'a' * 40}"
    assert f"state={posted}" in args and "context=verification report" in args


def test_the_examples_callers_grant_what_the_called_jobs_ask_for() -> None:
    # GitHub checks every called job's permissions against the caller's before any `if:`.
    asked: dict[str, str] = {}
    for job in JOBS.values():
        asked |= job["permissions"]
    callers = {name: _caller(name) for name in ("verify.yml", "judge.yml")}
    for name, doc in callers.items():
        assert doc["permissions"] == {}
        (job,) = doc["jobs"].values()
        assert job["permissions"] == asked, name
        m = CALLED.match(job["uses"])
        assert m, job["uses"]
        assert job["with"]["stagegate-repository"] == f"{m[1]}/{m[2]}", name
        assert job["with"]["stagegate-ref"] == m[3], name  # the same commit, named twice
    verify, judge = callers["verify.yml"], callers["judge.yml"]
    assert set(verify["on"]) == {"pull_request", "push"}
    assert judge["on"] == {"workflow_run": {"workflows": [verify["name"]], "types": ["completed"]}}
    (job,) = judge["jobs"].values()
    assert job["secrets"] == {"gate-app-private-key": "${{ secrets.GATE_APP_PRIVATE_KEY }}"}
    assert job["with"]["app-client-id"] == "${{ vars.GATE_APP_CLIENT_ID }}"


def test_the_linters_check_the_examples_workflows_too() -> None:
    from .test_linters import WORKFLOWS as LINTED

    expected = sorted([*WORKFLOWS.glob("*.yml"), *EXAMPLE.glob("*.yml")])
    assert sorted(Path(p) for p in LINTED) == expected
