"""The trusted judge end to end, as judge.yml runs it: real stage records (the stagegate
fixtures, written by real runs) downloaded as an artifact, laid out, and judged by the real
stagegate with the default branch's pyproject.toml, never with anything from the change."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest

from .ci_tools import REPO, ROOT, TOOLS, FakeApi, stagegate_for_judge, tool

judge_records = tool("judge_records")

FIXTURES = ROOT / "stagegate" / "tests" / "fixtures" / "stagegate"
CPU_STAGES = ["static", "execution", "integration", "performance"]
GATE_FILES = [
    "pyproject.toml",
    "noxfile.py",
    ".github/workflows/verify.yml",
    "stagegate/src/stagegate/judge.py",
]


def judge(
    tmp_path: Path, artifact: Path, *extra: str, changed: list[str] = GATE_FILES,
    command: str | None = None,
) -> dict:  # fmt: skip
    """Run tools/ci/judge_records.py as judge.yml does; its outputs, and where it wrote."""
    wrapper, log, env = stagegate_for_judge(tmp_path)
    command = command or wrapper
    (tmp_path / "changed.txt").write_text("".join(f"{p}\n" for p in changed))
    outputs = tmp_path / "outputs"
    args = [
        "--artifact", str(artifact), "--work", str(tmp_path / "judge"), "--base", str(ROOT),
        "--out", str(tmp_path / "reports"), "--changed-files", str(tmp_path / "changed.txt"),
        *(f"--stage={s}" for s in CPU_STAGES), *extra,
        "--", "--require", "static", "--require", "execution", "--require", "integration",
    ]  # fmt: skip
    run = subprocess.run(
        [sys.executable, str(TOOLS / "judge_records.py"), *args],
        env={**os.environ, **env, "STAGEGATE": command, "GITHUB_OUTPUT": str(outputs)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    found = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    found["changed-files given"] = log.read_text() if log.exists() else None
    return found


def copy_fixture(tmp_path: Path, name: str) -> Path:
    art = tmp_path / "artifact"
    shutil.copytree(FIXTURES / name, art)
    return art


@pytest.mark.slow
def test_a_clean_run_passes_and_stagegate_is_given_the_changes_files(tmp_path: Path) -> None:
    out = judge(tmp_path, copy_fixture(tmp_path, "pass-cpu"))
    assert out["state"] == "success", out
    assert out["changed-files given"].splitlines() == GATE_FILES
    assert (tmp_path / "reports" / "summary.md").exists()


@pytest.mark.slow
def test_a_failing_run_is_blocked(tmp_path: Path) -> None:
    assert judge(tmp_path, copy_fixture(tmp_path, "block"))["state"] == "failure"


def test_a_record_pointing_at_the_committed_baseline_is_refused(tmp_path: Path) -> None:
    art = copy_fixture(tmp_path, "pass-cpu")
    record = json.loads((art / "performance.json").read_text())
    record["files"]["benchmark"] = "reports/baseline/benchmark-h100-80gb-hbm3.json"
    (art / "performance.json").write_text(json.dumps(record))
    out = judge(tmp_path, art)
    assert out["state"] == "error" and "reports/baseline" in out["description"]
    assert not (tmp_path / "reports" / "summary.md").exists(), "stagegate must not have run"


@pytest.mark.slow
def test_records_of_another_commit_than_the_judged_one_are_refused(tmp_path: Path) -> None:
    # gpu.yml passes the SHA it admitted: another commit's passing records say nothing of it
    art = copy_fixture(tmp_path, "pass-cpu")
    named = json.loads((art / "execution.json").read_text())["commit"]
    out = judge(tmp_path, art, "--commit", "f" * 40)
    assert out["state"] == "error" and named in out["description"], out
    assert not (tmp_path / "reports" / "summary.md").exists(), "stagegate must not have run"
    same = judge(tmp_path / "same", copy_fixture(tmp_path / "same", "pass-cpu"), "--commit", named)
    assert same["state"] == "success", same


@pytest.mark.slow
def test_the_default_branch_policy_requires_what_the_change_dropped(tmp_path: Path) -> None:
    # A change that stops running integration (and would mark it optional in its own policy)
    # is judged by the default branch's pyproject.toml: the stage is missing, so it blocks.
    art = copy_fixture(tmp_path, "pass-cpu")
    for name in ("integration.json", "junit-integration.xml", "integration-metrics.json"):
        (art / name).unlink()
    (art / "pyproject.toml").write_text('[tool.stagegate]\nrequired = ["static"]\n')
    out = judge(tmp_path, art)
    assert out["state"] == "failure", out


@pytest.mark.slow
def test_the_cpu_judge_blocks_a_run_whose_cpu_benchmark_did_not_run(tmp_path: Path) -> None:
    # The CPU stages include the cpu-smoke benchmark: its CPU checks (host syncs, autocast
    # dtypes, memory growth) are required; only what needs CUDA may go NOT VERIFIED.
    art = copy_fixture(tmp_path, "pass-cpu")
    for name in ("performance.json", "benchmark.json"):
        (art / name).unlink()
    out = judge(tmp_path, art)
    assert out["state"] == "failure", out
    verdict = json.loads((tmp_path / "reports" / "verdict.json").read_text())
    assert {s["name"]: s["status"] for s in verdict["stages"]}["performance"] == "MISSING"


@pytest.mark.slow
def test_a_known_problem_fails_even_a_passing_run(tmp_path: Path) -> None:
    out = judge(tmp_path, copy_fixture(tmp_path, "pass-cpu"), "--problem", "no CODEOWNERS on main")
    assert (out["state"], out["description"]) == ("failure", "no CODEOWNERS on main")


def test_a_missing_artifact_is_an_error_not_a_pass(tmp_path: Path) -> None:
    out = judge(tmp_path, tmp_path / "never-downloaded")
    assert out["state"] == "error" and "no artifact" in out["description"]


# named alike in every virtualenv: a stage in another finds it by name
@pytest.mark.parametrize(
    "command", ["true", "false", f"{sys.executable} -c pass"], ids=["true", "false", "python"]
)
def test_an_exit_code_without_a_verdict_is_no_verdict(tmp_path: Path, command: str) -> None:
    # a stagegate that failed to start may exit 1, which must not read as a BLOCK, nor 0 a PASS.
    out = judge(tmp_path, copy_fixture(tmp_path, "pass-cpu"), command=command)
    assert out["state"] == "error" and "verdict.json" in out["description"]


@pytest.mark.slow
def test_the_summary_lists_first_every_gate_file_the_change_touches(tmp_path: Path) -> None:
    changed = [*GATE_FILES, "src/amptrain/loop.py"]
    judge(tmp_path, copy_fixture(tmp_path, "pass-cpu"), changed=changed)
    summary = (tmp_path / "reports" / "summary.md").read_text()
    top = summary.split("| Stage |", 1)[0]
    for path in GATE_FILES:
        assert path in top, f"{path} is not listed above the stage table"
    assert "src/amptrain/loop.py" not in top


def http_error(code: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError("https://api.github.com", code, "x", None, None)  # type: ignore[arg-type]


def test_codeowners_that_cannot_require_reviews_is_a_problem() -> None:
    path = f"/repos/{REPO}/codeowners/errors"
    bad = FakeApi({path: {"errors": [{"line": 9, "kind": "Unknown owner"}]}})
    assert "Unknown owner" in judge_records.codeowners_problem(bad, REPO, "main")
    assert judge_records.codeowners_problem(FakeApi({path: {"errors": []}}), REPO, "main") is None

    def missing(params: dict) -> None:
        raise http_error(404)

    assert "no CODEOWNERS" in judge_records.codeowners_problem(
        FakeApi({path: missing}), REPO, "main"
    )


def skip_test_two(art: Path) -> None:
    """The execution stage's ``test_two`` skipped, its record sealed as stagegate run seals it."""
    junit = art / "junit-execution.xml"
    xml = junit.read_text().replace(
        'name="test_two" time="0.010" />',
        'name="test_two" time="0.010"><skipped message="flaky on shared runners" /></testcase>',
    )
    xml = xml.replace('skipped="0"', 'skipped="1"', 1)
    junit.write_text(xml)
    record = json.loads((art / "execution.json").read_text())
    digest = hashlib.sha256(junit.read_bytes()).hexdigest()
    record["sha256"]["reports/raw/junit-execution.xml"] = digest
    (art / "execution.json").write_text(json.dumps(record))


@pytest.mark.slow
def test_tests_the_change_newly_skips_are_named_against_the_base_branch(tmp_path: Path) -> None:
    base = tmp_path / "base-artifact"
    shutil.copytree(FIXTURES / "pass-cpu", base)
    art = copy_fixture(tmp_path, "pass-cpu")
    skip_test_two(art)
    judge(tmp_path, art, "--base-artifact", str(base))
    verdict = json.loads((tmp_path / "reports" / "verdict.json").read_text())
    execution = next(s for s in verdict["stages"] if s["name"] == "execution")
    skipped = [f for f in execution["findings"] if f["kind"] == "skipped_share_rose"]
    assert skipped and "test_two" in skipped[0]["detail"], execution["findings"]


@pytest.mark.slow
@pytest.mark.parametrize("hostile", ["absent", "points outside"])
def test_a_base_artifact_that_cannot_be_used_is_compared_with_nothing(
    tmp_path: Path, hostile: str
) -> None:
    base = tmp_path / "base-artifact"
    if hostile == "points outside":
        shutil.copytree(FIXTURES / "pass-cpu", base)
        record = json.loads((base / "execution.json").read_text())
        record["files"]["junit"] = "reports/baseline/benchmark-h100-80gb-hbm3.json"
        (base / "execution.json").write_text(json.dumps(record))
    art = copy_fixture(tmp_path, "pass-cpu")
    skip_test_two(art)
    out = judge(tmp_path, art, "--base-artifact", str(base))
    verdict = json.loads((tmp_path / "reports" / "verdict.json").read_text())
    execution = next(s for s in verdict["stages"] if s["name"] == "execution")
    assert not [f for f in execution["findings"] if f["kind"] == "skipped_share_rose"]
    assert out["state"] in {"success", "failure"}, out  # a verdict, not an error
