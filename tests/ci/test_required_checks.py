"""The required checks always report, and report failure on every path but a full PASS.

GitHub counts a skipped required check as passing. The two checks are commit statuses that the
default branch's judge.yml and gpu.yml set; these tests take the jobs and steps that set them
from the workflow files, evaluate their `if:` for every outcome of what comes before them
(every conclusion of the verify run, every result of the judge and benchmark jobs, a cancelled
workflow) and compute the status they post with the scripts themselves. Removing a guard
(`always()`, the upstream conclusion, the judge's result) makes one of these fail.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .ci_tools import REPO, load_workflow, tool
from .gha_expressions import evaluate, truthy

verdict_status = tool("verdict_status")
status_sweep = tool("status_sweep")
gpu_gate = tool("gpu_gate")

JUDGE, GPU, SWEEP = (load_workflow(f"{n}.yml") for n in ("judge", "gpu", "sweep"))
CONCLUSIONS = [
    "success", "failure", "cancelled", "timed_out", "action_required", "neutral", "skipped",
    "stale", "startup_failure", None,
]  # fmt: skip
RESULTS = ["success", "failure", "cancelled", "skipped"]
# What a judge can have said (stagegate PASS, BLOCK, no verdict), and nothing at all.
VERDICTS = [("success", "PASS"), ("failure", "BLOCK"), ("error", "broken input"), ("", "")]
HEAD = "a" * 40


def _runs(condition: str | None, ctx: Mapping[str, Any], needs_ok: bool, cancelled: bool) -> bool:
    """Whether a job or step with ``if: condition`` runs. Without a status function GitHub
    evaluates ``success() && (condition)``; a cancelled run fails success()."""
    status = {
        "success": needs_ok and not cancelled,
        "failure": not needs_ok,
        "cancelled": cancelled,
        "always": True,
    }
    text = str(condition or "success()").strip().removeprefix("${{").removesuffix("}}")
    if not any(f"{fn}(" in text for fn in status):
        text = f"success() && ({text})"
    return truthy(evaluate(text, ctx, status))


def _workflow_run(conclusion: str | None, action: str = "completed") -> dict[str, Any]:
    return {
        "event_name": "workflow_run",
        "event": {
            "action": action,
            "workflow_run": {"id": 9, "head_sha": HEAD, "conclusion": conclusion},
            "repository": {"full_name": REPO, "default_branch": "main"},
        },
    }


@pytest.mark.parametrize("conclusion", CONCLUSIONS)
def test_every_completed_verify_run_is_looked_at_and_only_a_success_runs_the_stages(
    conclusion: str | None,
) -> None:
    ctx: dict[str, Any] = {"github": _workflow_run(conclusion)}
    assert _runs(JUDGE["jobs"]["change"].get("if"), ctx, True, False)
    change = {
        "result": "success",
        "outputs": {"judge": "true", "commit": HEAD, "image": "ghcr.io/o/i@sha256:x"},
    }
    ctx["needs"] = {"change": change}  # fmt: skip
    ran = _runs(JUDGE["jobs"]["stages"].get("if"), ctx, True, False)
    assert ran == (conclusion == "success"), "a fork's unapproved run must not run its stages"
    ctx["needs"]["stages"] = {"result": "success" if ran else "skipped"}
    assert _runs(JUDGE["jobs"]["judge"]["if"], ctx, ran, False)


def test_a_requested_verify_run_marks_the_commit_pending_and_is_not_judged() -> None:
    ctx = {"github": _workflow_run(None, action="requested")}
    assert _runs(JUDGE["jobs"]["pending"]["if"], ctx, True, False)
    assert not _runs(JUDGE["jobs"]["change"]["if"], ctx, True, False)
    run = {"id": 9, "path": ".github/workflows/verify.yml", "repository": {"full_name": REPO}}
    assert verdict_status.pending_refusal({**run, "status": "in_progress"}, REPO) is None


@pytest.mark.parametrize(
    "changes",
    [{"status": "completed"}, {"path": ".github/workflows/evil.yml", "status": "queued"}],
)
def test_no_pending_over_a_verdict_or_for_another_file_named_verify(changes: dict) -> None:
    # A finished run's judge may already have set the verdict; another file is not verify.yml.
    run = {"id": 9, "path": ".github/workflows/verify.yml", "repository": {"full_name": REPO}}
    assert verdict_status.pending_refusal({**run, **changes}, REPO)


CASES = list(itertools.product(RESULTS, RESULTS, VERDICTS, [False, True]))


@pytest.mark.parametrize(("stages", "result", "verdict", "cancelled"), CASES)
def test_the_verification_report_always_reports_and_passes_only_a_full_pass(
    stages: str, result: str, verdict: tuple[str, str], cancelled: bool
) -> None:
    state, description = verdict  # a judge that failed late may have written its outputs
    outputs = {"state": state, "description": description} if state else {}
    ctx = {
        "github": _workflow_run("success"),
        "needs": {
            "change": {"result": "success", "outputs": {"judge": "true"}},
            "stages": {"result": stages, "outputs": {}},
            "judge": {"result": result, "outputs": outputs},
        },
    }
    needs_ok = (stages, result) == ("success", "success")
    job = JUDGE["jobs"]["report"]
    assert _runs(job["if"], ctx, needs_ok, cancelled), "the status job was skipped"
    for each in job["steps"]:  # the checkout and the App's token too: each must run
        assert _runs(each.get("if"), ctx, needs_ok, cancelled), each.get("name")
    step = next(s for s in job["steps"] if "verdict_status.py final" in s.get("run", ""))
    env = {k: evaluate(v, ctx) for k, v in step["env"].items() if k != "GATE_TOKEN"}
    assert env["SHA"] == HEAD
    posted = verdict_status.final(
        env["UPSTREAM"] or "", env["JUDGE"] or "", env["STATE"] or "", env["DESCRIPTION"] or ""
    )
    full_pass = (stages, result, state) == ("success", "success", "success")
    assert posted.passed == full_pass, (stages, result, state, posted)
    assert posted.state in verdict_status.FINAL_STATES and posted.description


@pytest.mark.parametrize("change", [{"judge": "false"}, {"judge": "true", "commit": ""}])
def test_a_run_that_is_not_judged_or_cannot_run_is_handled(change: dict[str, str]) -> None:
    # another file named verify, or a pull request into another branch: the status is left
    # alone; a change whose merge commit does not check out: the stages skip, the report fails
    ctx = {
        "github": _workflow_run("success"),
        "needs": {"change": {"result": "success", "outputs": change},
                  "stages": {"result": "skipped"}, "judge": {"result": "success"}},
    }  # fmt: skip
    assert not _runs(JUDGE["jobs"]["stages"]["if"], ctx, True, False)
    assert _runs(JUDGE["jobs"]["report"]["if"], ctx, False, False) == (change["judge"] == "true")


BENCHMARK_CASES = list(itertools.product(RESULTS, RESULTS, VERDICTS, [False, True]))


@pytest.mark.parametrize(("benchmark", "judge", "verdict", "cancelled"), BENCHMARK_CASES)
def test_the_gpu_verification_always_reports_for_an_admitted_commit(
    benchmark: str, judge: str, verdict: tuple[str, str], cancelled: bool
) -> None:
    state, description = verdict  # a judge job that failed late may have written its outputs
    ctx = {
        "github": {"event_name": "workflow_run"},
        "needs": {
            "authorize": {"result": "success", "outputs": {"run": "true", "sha": HEAD}},
            "mark": {"result": "success", "outputs": {}},
            "dispatch": {"result": benchmark, "outputs": {}},
            "status": {"result": judge, "outputs": {"state": state, "description": description}},
        },
    }
    needs_ok = (benchmark, judge) == ("success", "success")
    assert _runs(GPU["jobs"]["status"]["if"], ctx, benchmark == "success", cancelled)
    job = GPU["jobs"]["report"]
    assert _runs(job["if"], ctx, needs_ok, cancelled), "the status job was skipped"
    for step in job["steps"]:  # the checkout and the App's token too: each must run
        assert _runs(step.get("if"), ctx, needs_ok, cancelled), step.get("name")
    post = next(s for s in job["steps"] if "verdict_status.py final" in s.get("run", ""))
    env = {k: evaluate(v, ctx) for k, v in post["env"].items() if k != "GATE_TOKEN"}
    assert env["SHA"] == HEAD
    posted = verdict_status.final(
        env["UPSTREAM"] or "", env["JUDGE"] or "", env["STATE"] or "", env["DESCRIPTION"] or ""
    )
    full_pass = (benchmark, judge, state) == ("success", "success", "success")
    assert posted.passed == full_pass, (benchmark, judge, state, posted)


@pytest.mark.parametrize("result", ["failure", "cancelled"])
@pytest.mark.parametrize("event_name", ["workflow_run", "push", "workflow_dispatch"])
def test_a_failed_authorization_still_reports_an_error(result: str, event_name: str) -> None:
    ctx = {"github": {"event_name": event_name}, "needs": {"authorize": {"result": result}}}
    job = GPU["jobs"]["authorize-failed"]
    assert _runs(job["if"], ctx, False, result == "cancelled")
    payloads = {
        "workflow_run": {"workflow_run": {"head_sha": HEAD}},
        "push": {},
        "workflow_dispatch": {"inputs": {"sha": HEAD}},
    }
    assert gpu_gate.subject(event_name, payloads[event_name], HEAD) == HEAD
    assert "--state error" in job["steps"][-1]["run"]
    for step in job["steps"]:
        assert _runs(step.get("if"), ctx, False, result == "cancelled"), step.get("name")


def test_a_failed_authorization_of_a_comment_marks_no_commit() -> None:
    # Anyone can write a comment naming any SHA: it must not turn another commit's check red.
    ctx = {"github": {"event_name": "issue_comment"}, "needs": {"authorize": {"result": "failure"}}}
    assert not _runs(GPU["jobs"]["authorize-failed"]["if"], ctx, False, False)
    assert (
        gpu_gate.subject("issue_comment", {"comment": {"body": f"/gpu-approve {HEAD}"}}, "") == ""
    )


def test_a_benchmark_without_a_trusted_image_is_skipped_and_still_judged() -> None:
    ctx = {"needs": {"authorize": {"result": "success", "outputs": {"run": "true", "image": ""}}}}
    assert not _runs(GPU["jobs"]["dispatch"]["if"], ctx, True, False)
    ctx["needs"]["dispatch"] = {"result": "skipped"}
    assert _runs(GPU["jobs"]["status"]["if"], ctx, False, False)


# The path where nothing fires: no verify run, no judge. sweep.yml, on a schedule, sweeps.
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_the_sweep_runs_on_its_schedule_from_the_default_branch_in_a_file_of_its_own() -> None:
    # GitHub disables a scheduled workflow as a whole after 60 days without activity in a
    # public repository: the judge must not share a file with a schedule.
    assert set(SWEEP["on"]) == {"schedule"} and "schedule" not in JUDGE["on"]
    (job,) = SWEEP["jobs"].values()
    assert _runs(job.get("if"), {"github": {"event_name": "schedule"}}, True, False)
    assert any("tools/ci/status_sweep.py" in s.get("run", "") for s in job["steps"])


GATE_BOT = "amptrain-gate[bot]"  # the gate App's login: only its statuses count


def by_app(*statuses: dict[str, Any], author: str = GATE_BOT) -> list[dict[str, Any]]:
    return [{**s, "creator": {"login": author}} for s in statuses]


def test_the_sweep_fails_checks_no_run_ever_reported() -> None:
    stale = status_sweep.stale([], NOW - timedelta(hours=2), NOW, GATE_BOT)
    assert set(stale) == {"verification report", "gpu verification"}
    assert all(s.state == "failure" for s in stale.values())


REPORTED = [
    {"context": "verification report", "state": "success", "updated_at": "2026-01-01T11:00Z"},
    {"context": "gpu verification", "state": "pending", "updated_at": "2025-12-25T00:00Z",
     "description": f"a fork's pull request: waiting for /gpu-approve {HEAD}"},
]  # fmt: skip


def test_the_sweep_leaves_young_pull_requests_and_reported_checks_alone() -> None:
    assert status_sweep.stale([], NOW - timedelta(minutes=5), NOW, GATE_BOT) == {}
    assert status_sweep.stale(by_app(*REPORTED), NOW - timedelta(days=9), NOW, GATE_BOT) == {}


def test_a_status_of_the_same_name_from_another_identity_is_not_a_report() -> None:
    # A branch workflow's GITHUB_TOKEN (github-actions[bot]) or a person can set a status
    # named like the check: the ruleset ignores it, and so does the sweep.
    forged = by_app(*REPORTED, author="github-actions[bot]")
    stale = status_sweep.stale(forged, NOW - timedelta(days=9), NOW, GATE_BOT)
    assert set(stale) == {"verification report", "gpu verification"}


def test_the_newest_status_of_the_app_is_the_one_that_counts() -> None:
    newest_first = by_app(
        {"context": "verification report", "state": "pending", "updated_at": "2025-12-30T00:00Z"},
        {"context": "verification report", "state": "success", "updated_at": "2025-12-29T00:00Z"},
    )
    stale = status_sweep.stale(newest_first, NOW - timedelta(days=3), NOW, GATE_BOT)
    assert stale["verification report"].description.startswith("still pending")


def test_the_sweep_fails_a_check_left_pending_by_a_lost_run() -> None:
    lost = by_app(
        {"context": "verification report", "state": "pending", "updated_at": "2025-12-30T00:00Z"},
        {"context": "gpu verification", "state": "pending", "updated_at": "2025-12-30T00:00Z",
         "description": verdict_status.RUNNING},
    )  # fmt: skip
    stale = status_sweep.stale(lost, NOW - timedelta(days=3), NOW, GATE_BOT)
    assert set(stale) == {"verification report", "gpu verification"}
