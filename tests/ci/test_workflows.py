"""The workflows under every event that can reach them: which run, which jobs run, and whether
a required check can be skipped or fork code can reach the GPU runner unapproved.

Triggers are matched as GitHub matches them and every `if:` is evaluated by the expression
language (tests/ci/gha_expressions.py); gpu.yml's admission is tools/ci/gpu_gate.py itself.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from .gha_expressions import evaluate, job_runs

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
REPO, FORK = "owner/amptrain", "someone/amptrain"
HEAD, OTHER = "a" * 40, "b" * 40
REQUIRED_CHECKS = {"verification report"}  # the job; "gpu verification" is a commit status

spec = importlib.util.spec_from_file_location("gpu_gate", ROOT / "tools" / "ci" / "gpu_gate.py")
gpu_gate = importlib.util.module_from_spec(spec)
sys.modules["gpu_gate"] = gpu_gate  # dataclasses look their module up there
spec.loader.exec_module(gpu_gate)  # type: ignore[union-attr]


def load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    return doc


DOCS = {p.name: load(p.name) for p in sorted(WORKFLOWS.glob("*.yml"))}
# The activity types GitHub uses when a workflow names none.
DEFAULT_TYPES = {"pull_request": {"opened", "synchronize", "reopened"}}


@dataclass
class Scenario:
    """One event as GitHub delivers it, and who may approve what."""

    name: str
    event_name: str
    payload: dict[str, Any]
    ref: str = "refs/heads/main"
    fork: bool = False
    approved: bool = False  # a maintainer approved exactly this head SHA
    writers: set[str] = field(default_factory=lambda: {"maintainer"})

    def context(self) -> dict[str, Any]:
        return {
            "github": {
                "event_name": self.event_name,
                "event": self.payload,
                "ref": self.ref,
                "repository": REPO,
                "repository_owner": "owner",
                "sha": HEAD,
            },
            "inputs": self.payload.get("inputs", {}),
        }


def _pull(action: str, fork: bool, label: str | None = None) -> dict[str, Any]:
    head_repo = FORK if fork else REPO
    payload = {
        "action": action,
        "number": 7,
        "pull_request": {"number": 7, "head": {"sha": HEAD, "repo": {"full_name": head_repo}}},
        "repository": {"full_name": REPO, "default_branch": "main"},
    }
    if label:
        payload["label"] = {"name": label}
    return payload


def _verify_run(kind: str, fork: bool = False, branch: str = "main") -> dict[str, Any]:
    return {
        "action": "completed",
        "workflow_run": {
            "name": "verify",
            "event": kind,
            "head_sha": HEAD,
            "head_branch": branch,
            "head_repository": {"full_name": FORK if fork else REPO},
        },
        "repository": {"full_name": REPO, "default_branch": "main"},
    }


def _comment(body: str, user: str, on_pull: bool = True) -> dict[str, Any]:
    issue: dict[str, Any] = {"number": 7}
    if on_pull:
        issue["pull_request"] = {"url": "…"}
    return {
        "action": "created",
        "issue": issue,
        "comment": {"body": body, "user": {"login": user}},
        "repository": {"full_name": REPO, "default_branch": "main"},
    }


PR_ACTIONS = [
    "opened",
    "synchronize",
    "reopened",
    "edited",
    "closed",
    "labeled",
    "unlabeled",
    "ready_for_review",
    "converted_to_draft",
    "assigned",
    "review_requested",
]
SCENARIOS = [
    *(
        Scenario(
            f"pull_request {a} ({'fork' if f else 'same repo'})",
            "pull_request",
            _pull(a, f, "gpu-approved" if a in ("labeled", "unlabeled") else None),
            ref="refs/pull/7/merge",
            fork=f,
        )
        for a in PR_ACTIONS
        for f in (False, True)
    ),
    Scenario(
        "pull_request labeled with another label",
        "pull_request",
        _pull("labeled", True, "documentation"),
        ref="refs/pull/7/merge",
        fork=True,
    ),
    Scenario("push to main", "push", {"repository": {"full_name": REPO}}),
    Scenario("manual run of verify", "workflow_dispatch", {"inputs": {}}),
    Scenario("merge queue", "merge_group", {"action": "checks_requested"}),
    Scenario("verify done for a push", "workflow_run", _verify_run("push")),
    Scenario(
        "verify done for a same-repo PR",
        "workflow_run",
        _verify_run("pull_request", branch="feature"),
    ),
    Scenario(
        "verify done for a fork PR",
        "workflow_run",
        _verify_run("pull_request", fork=True),
        fork=True,
    ),
    Scenario(
        "verify done for a fork PR from its own main",
        "workflow_run",
        _verify_run("pull_request", fork=True, branch="main"),
        fork=True,
    ),
    Scenario(
        "maintainer approves the head",
        "issue_comment",
        _comment(f"/gpu-approve {HEAD}", "maintainer"),
        fork=True,
        approved=True,
    ),
    Scenario(
        "maintainer approves an old SHA",
        "issue_comment",
        _comment(f"/gpu-approve {OTHER}", "maintainer"),
        fork=True,
    ),
    Scenario(
        "outsider approves the head",
        "issue_comment",
        _comment(f"/gpu-approve {HEAD}", "outsider"),
        fork=True,
    ),
    Scenario(
        "approval text inside a longer comment",
        "issue_comment",
        _comment(f"LGTM\n/gpu-approve {HEAD}", "maintainer"),
        fork=True,
    ),
    Scenario(
        "approval on an issue",
        "issue_comment",
        _comment(f"/gpu-approve {HEAD}", "maintainer", on_pull=False),
        fork=True,
    ),
    Scenario("an ordinary comment", "issue_comment", _comment("looks good", "outsider"), fork=True),
    Scenario(
        "a short SHA",
        "issue_comment",
        _comment(f"/gpu-approve {HEAD[:7]}", "maintainer"),
        fork=True,
    ),
    Scenario(
        "maintainer dispatches the GPU run",
        "workflow_dispatch",
        {"inputs": {"sha": HEAD}, "sender": {"login": "maintainer"}},
        approved=True,
    ),
]


def triggered(doc: Mapping[str, Any], s: Scenario) -> bool:
    """Whether ``doc``'s `on:` starts a run for the scenario's event."""
    on = doc["on"]
    if isinstance(on, str | list):
        return s.event_name in ([on] if isinstance(on, str) else on)
    if s.event_name not in on:
        return False
    spec = on[s.event_name] or {}
    types = set(spec.get("types") or DEFAULT_TYPES.get(s.event_name, ()))
    if types and s.payload.get("action") not in types:
        return False
    if s.event_name == "workflow_run":
        return s.payload["workflow_run"]["name"] in spec["workflows"]
    return True


def _needs(job: Mapping[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def _outputs(doc_name: str, job_name: str, s: Scenario) -> dict[str, str]:
    if (doc_name, job_name) != ("gpu.yml", "authorize"):
        return {}
    pull = {"state": "open", "head": {"sha": HEAD}}
    decision = gpu_gate.decide(
        s.event_name,
        s.payload,
        REPO,
        lambda user: "write" if user in s.writers else "read",
        lambda number: pull,
    )
    return {"run": "true" if decision.run else "false", "sha": decision.sha}


def jobs_that_run(doc_name: str, s: Scenario) -> dict[str, bool]:
    """Every job of the workflow: True when it runs (its needs succeeded, or `if:` said so)."""
    doc = DOCS[doc_name]
    ran: dict[str, bool] = {}
    needs_ctx: dict[str, Any] = {}
    for name, job in doc["jobs"].items():  # jobs are listed after the jobs they need
        needed = _needs(job)
        ctx = {**s.context(), "needs": {n: needs_ctx[n] for n in needed}}
        ok = all(ran[n] for n in needed)
        ran[name] = job_runs(job.get("if"), ctx, ok)
        needs_ctx[name] = {
            "result": "success" if ran[name] else "skipped",
            "outputs": _outputs(doc_name, name, s) if ran[name] else {},
        }
    return ran


def _self_hosted(job: Mapping[str, Any]) -> bool:
    runs_on = job.get("runs-on")
    labels = [runs_on] if isinstance(runs_on, str) else list(runs_on or [])
    return "self-hosted" in labels


def runs_of(s: Scenario) -> list[tuple[str, Mapping[str, Any], bool]]:
    """(workflow:job, job, whether it runs) for every job of every workflow ``s`` starts."""
    out = []
    for doc_name, doc in DOCS.items():
        if triggered(doc, s):
            ran = jobs_that_run(doc_name, s)
            out += [(f"{doc_name}:{n}", job, ran[n]) for n, job in doc["jobs"].items()]
    return out


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.name)
def test_no_event_skips_a_required_check(s: Scenario) -> None:
    for where, job, ran in runs_of(s):
        if job.get("name") in REQUIRED_CHECKS:
            assert ran, f"{where} ({job['name']}) is skipped on {s.name}"


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.name)
def test_fork_code_never_reaches_the_gpu_runner_unapproved(s: Scenario) -> None:
    for where, job, ran in runs_of(s):
        if _self_hosted(job) and ran:
            assert not s.fork or s.approved, f"{where} runs fork code on {s.name}"


def test_every_pull_request_gets_a_verify_run_and_so_a_comment() -> None:
    for action in ("opened", "synchronize", "reopened"):
        for fork in (False, True):
            s = Scenario("pr", "pull_request", _pull(action, fork), fork=fork)
            assert triggered(DOCS["verify.yml"], s)
    comment = DOCS["pr-comment.yml"]
    done = Scenario("verify done", "workflow_run", _verify_run("pull_request", fork=True))
    assert triggered(comment, done)
    (job,) = comment["jobs"].values()
    ctx = {
        "github": {"event": {"workflow_run": {"event": "pull_request", "conclusion": "failure"}}}
    }
    assert job_runs(job["if"], ctx, True)  # a BLOCKed run still gets its comment


def test_same_repository_pull_requests_and_pushes_run_the_gpu_stage() -> None:
    for label in (
        "verify done for a push",
        "verify done for a same-repo PR",
        "maintainer dispatches the GPU run",
        "maintainer approves the head",
    ):
        s = next(x for x in SCENARIOS if x.name == label)
        assert jobs_that_run("gpu.yml", s)["benchmark"], label


def test_ordinary_comments_stop_before_the_gate_runs() -> None:
    s = next(x for x in SCENARIOS if x.name == "an ordinary comment")
    assert triggered(DOCS["gpu.yml"], s)
    assert not any(jobs_that_run("gpu.yml", s).values())


def test_a_fork_waits_with_a_pending_status_until_approved() -> None:
    s = next(x for x in SCENARIOS if x.name == "verify done for a fork PR")
    decision = gpu_gate.decide(s.event_name, s.payload, REPO, lambda u: "read", lambda n: {})
    assert not decision.run and decision.pending and decision.sha == HEAD
    assert f"/gpu-approve {HEAD}" in decision.reason


def test_workflows_that_reach_the_gpu_runner_only_run_the_default_branch_definition() -> None:
    # pull_request(_target) and push on other branches run a file the change itself may edit.
    default_branch_only = {"workflow_run", "issue_comment", "workflow_dispatch", "schedule"}
    for doc_name, doc in DOCS.items():
        assert "pull_request_target" not in doc["on"], doc_name
        if any(_self_hosted(job) for job in doc["jobs"].values()):
            assert set(doc["on"]) <= default_branch_only, doc_name


def test_the_gpu_job_checks_out_the_admitted_sha_with_a_read_only_token() -> None:
    job = DOCS["gpu.yml"]["jobs"]["benchmark"]
    assert job["needs"] == ["authorize"] and job["permissions"] == {"contents": "read"}
    checkout = job["steps"][0]
    assert checkout["with"]["ref"] == "${{ needs.authorize.outputs.sha }}"
    assert "secrets." not in yaml.safe_dump(job)
    authorize = DOCS["gpu.yml"]["jobs"]["authorize"]
    assert "ref" not in authorize["steps"][0].get("with", {})  # the default branch's gate


def test_the_gpu_status_is_judged_by_the_default_branch() -> None:
    status = DOCS["gpu.yml"]["jobs"]["status"]
    assert status["name"] == gpu_gate.STATUS_CONTEXT
    assert "ref" not in status["steps"][0].get("with", {})
    run = next(s["run"] for s in status["steps"] if "stagegate report" in s.get("run", ""))
    assert "--only performance --require performance" in run
    assert 'context="gpu verification"' in run


ALLOWED = {
    ("verify.yml", "publish-image"): {"contents": "read", "packages": "write"},
    ("verify.yml", "stages"): {"contents": "read"},
    ("verify.yml", "report"): {"contents": "read"},
    ("gpu.yml", "authorize"): {"contents": "read", "pull-requests": "read", "statuses": "write"},
    ("gpu.yml", "benchmark"): {"contents": "read"},
    ("gpu.yml", "status"): {"contents": "read", "actions": "read", "statuses": "write"},
    ("pr-comment.yml", "comment"): {"actions": "read", "pull-requests": "write"},
    ("mutation.yml", "mutation"): {"contents": "read"},
}


def test_mutation_testing_runs_weekly_and_uploads_its_report() -> None:
    doc = DOCS["mutation.yml"]
    triggers = doc.get("on", doc.get(True))
    assert set(triggers) == {"schedule", "workflow_dispatch"}  # never a merge gate: hours long
    (cron,) = (entry["cron"] for entry in triggers["schedule"])
    assert cron.split()[2:] == ["*", "*", "1"]  # once a week
    steps = doc["jobs"]["mutation"]["steps"]
    assert any("nox" in step.get("run", "") and "-s mutation" in step["run"] for step in steps)
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/mutation"


@pytest.mark.parametrize("name", sorted(DOCS))
def test_permissions_are_empty_at_the_top_and_minimal_per_job(name: str) -> None:
    doc = DOCS[name]
    assert doc["permissions"] == {}
    for job_name, job in doc["jobs"].items():
        assert job["permissions"] == ALLOWED[(name, job_name)], job_name
        assert "timeout-minutes" in job


def test_only_main_can_publish_the_image() -> None:
    job = DOCS["verify.yml"]["jobs"]["publish-image"]
    for s in SCENARIOS:
        if triggered(DOCS["verify.yml"], s) and job_runs(job["if"], s.context(), True):
            assert s.event_name == "push" and s.ref == "refs/heads/main", s.name


# Current majors (Node 24): each SHA is the commit of the tag in the comment.
MINIMUM_MAJOR = {
    "actions/checkout": 5,
    "actions/upload-artifact": 6,
    "actions/download-artifact": 7,
    "actions/github-script": 8,
}
PINNED = re.compile(r"^(?P<action>[\w.-]+/[\w.-]+)@[0-9a-f]{40} # v(?P<major>\d+)(\.\d+)*$")


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_action_is_a_current_major_pinned_by_full_sha(name: str) -> None:
    uses = re.findall(r"^\s*(?:- )?uses: (.+)$", (WORKFLOWS / name).read_text(), re.MULTILINE)
    assert uses
    for ref in uses:
        m = PINNED.match(ref.strip())
        assert m, ref
        assert int(m["major"]) >= MINIMUM_MAJOR[m["action"]], ref


def test_checkouts_do_not_persist_credentials() -> None:
    for doc in DOCS.values():
        for job in doc["jobs"].values():
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False


def test_no_expression_is_expanded_inside_a_shell_script() -> None:
    for doc in DOCS.values():
        for job in doc["jobs"].values():
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), step.get("name")


def test_every_expression_in_every_workflow_parses_and_evaluates() -> None:
    s = next(x for x in SCENARIOS if x.name.startswith("pull_request opened (fork)"))
    ctx = {**s.context(), "needs": {}, "steps": {}, "inputs": {}}
    texts = re.findall(
        r"\$\{\{(.*?)\}\}", "\n".join(p.read_text() for p in WORKFLOWS.glob("*.yml"))
    )
    conditions = [
        job.get("if") for doc in DOCS.values() for job in doc["jobs"].values() if job.get("if")
    ]
    assert texts and conditions
    for text in [*texts, *conditions]:
        evaluate(str(text), ctx)  # raises SyntaxError on anything the language does not allow


def test_the_comment_workflow_never_checks_out_or_runs_pull_request_code() -> None:
    comment = DOCS["pr-comment.yml"]
    assert comment["on"]["workflow_run"] == {"workflows": ["verify"], "types": ["completed"]}
    (job,) = comment["jobs"].values()
    assert not any("checkout" in s.get("uses", "") for s in job["steps"])
    assert not any("run" in s for s in job["steps"])
    script = next(s for s in job["steps"] if "github-script" in s.get("uses", ""))["with"]["script"]
    assert "pr.head.sha !== process.env.HEAD_SHA" in script
    assert "<!-- stagegate:verification-report -->" in script
