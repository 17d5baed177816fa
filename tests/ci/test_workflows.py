"""The workflows under every event that can reach them: which run, which jobs run, and whether
code under test can reach the GPU runner unapproved, become the baseline or publish the image.

Triggers are matched as GitHub matches them and every `if:` is evaluated by the expression
language (tests/ci/gha_expressions.py); gpu.yml's admission is tools/ci/gpu_gate.py itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from .ci_tools import FORK, REPO, WORKFLOWS, load_workflow, tool
from .gha_expressions import evaluate, job_runs

gpu_gate = tool("gpu_gate")

HEAD, OTHER = "a" * 40, "b" * 40
IMAGE = "ghcr.io/owner/amptrain-verify@sha256:" + "c" * 64
OWN_WORKFLOW = f"{REPO}/.github/workflows/gpu.yml@refs/heads/main"
DOCS = {p.name: load_workflow(p.name) for p in sorted(WORKFLOWS.glob("*.yml"))}
DEFAULT_TYPES = {"pull_request": {"opened", "synchronize", "reopened"}}
# Events no pull request starts: they run the default branch's file (workflow_dispatch runs the
# file of the ref someone with write access picks, which gpu_gate.py refuses unless it is main).
DEFAULT_BRANCH_EVENTS = {"workflow_run", "issue_comment", "workflow_dispatch", "schedule"}


@dataclass
class Scenario:
    """One event as GitHub delivers it, and who may approve what."""

    name: str
    event_name: str
    payload: dict[str, Any]
    ref: str = "refs/heads/main"
    workflow_ref: str = OWN_WORKFLOW
    untrusted: bool = False  # the commit is a fork's, Dependabot's or a non-maintainer's
    approved: bool = False  # a maintainer approved exactly this head SHA
    head_passed: bool = False  # a queued pull request's head passed on the GPU
    author: str = "maintainer"
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
                "workflow_ref": self.workflow_ref,
            },
            "inputs": self.payload.get("inputs", {}),
        }


REPOSITORY = {"full_name": REPO, "default_branch": "main"}


def _pull(action: str, fork: bool, label: str | None = None) -> dict[str, Any]:
    head_repo = FORK if fork else REPO
    payload = {
        "action": action,
        "number": 7,
        "pull_request": {"number": 7, "head": {"sha": HEAD, "repo": {"full_name": head_repo}}},
        "repository": REPOSITORY,
    }
    if label:
        payload["label"] = {"name": label}
    return payload


def verify_run(
    kind: str,
    fork: bool = False,
    branch: str = "main",
    actor: str = "maintainer",
    path: str = ".github/workflows/verify.yml",
    conclusion: str = "success",
) -> dict[str, Any]:
    """A workflow_run event: verify.yml finished for ``kind``."""
    head = FORK if fork else REPO
    return {
        "action": "completed",
        "workflow_run": {
            "id": 99,
            "name": "verify",
            "path": path,
            "event": kind,
            "conclusion": conclusion,
            "head_sha": HEAD,
            "head_branch": branch,
            "head_repository": {"full_name": head, "owner": {"login": head.split("/")[0]}},
            "repository": {"full_name": REPO},
            "actor": {"login": actor},
            "triggering_actor": {"login": actor},
            "pull_requests": []
            if fork or kind != "pull_request"
            else [{"number": 7, "base": {"ref": "main"}}],
        },
        "repository": REPOSITORY,
    }


def comment(body: str, user: str, on_pull: bool = True) -> dict[str, Any]:
    issue: dict[str, Any] = {"number": 7}
    if on_pull:
        issue["pull_request"] = {"url": "…"}
    return {
        "action": "created",
        "issue": issue,
        "comment": {"body": body, "user": {"login": user}},
        "repository": REPOSITORY,
    }


def dispatch(sha: str = HEAD, user: str = "maintainer") -> dict[str, Any]:
    return {"inputs": {"sha": sha}, "sender": {"login": user}, "repository": REPOSITORY}


PR_ACTIONS = [
    "opened", "synchronize", "reopened", "edited", "closed", "labeled", "unlabeled",
    "ready_for_review", "converted_to_draft", "assigned", "review_requested",
]  # fmt: skip
SCENARIOS = [
    *(
        Scenario(
            f"pull_request {a} ({'fork' if f else 'same repo'})",
            "pull_request",
            _pull(a, f, "gpu-approved" if a in ("labeled", "unlabeled") else None),
            ref="refs/pull/7/merge",
            untrusted=f,
        )
        for a in PR_ACTIONS
        for f in (False, True)
    ),
    Scenario("push to main", "push", {"ref": "refs/heads/main", "repository": REPOSITORY}),
    Scenario(
        "push to a branch",
        "push",
        {"ref": "refs/heads/feature", "repository": REPOSITORY},
        ref="refs/heads/feature",
        workflow_ref=f"{REPO}/.github/workflows/gpu.yml@refs/heads/feature",
        untrusted=True,
    ),
    Scenario("manual run of verify", "workflow_dispatch", {"inputs": {}, "repository": REPOSITORY}),
    Scenario("merge queue", "merge_group", {"action": "checks_requested"}),
    Scenario("verify done for a push", "workflow_run", verify_run("push")),
    Scenario(
        "verify done for a merge queue entry",
        "workflow_run",
        verify_run("merge_group", branch=f"gh-readonly-queue/main/pr-7-{HEAD}"),
        head_passed=True,
    ),
    Scenario(
        "verify done for a merge queue entry whose head never passed on the GPU",
        "workflow_run",
        verify_run("merge_group", branch=f"gh-readonly-queue/main/pr-7-{HEAD}"),
        untrusted=True,
    ),
    Scenario(
        "verify done for a maintainer's PR",
        "workflow_run",
        verify_run("pull_request", branch="feature"),
    ),
    Scenario(
        "verify done for a fork PR",
        "workflow_run",
        verify_run("pull_request", fork=True, branch="feature", actor="someone"),
        untrusted=True,
        author="someone",
    ),
    Scenario(
        "verify done for a fork PR from its own main",
        "workflow_run",
        verify_run("pull_request", fork=True, actor="someone"),
        untrusted=True,
        author="someone",
    ),
    Scenario(
        "verify done for a Dependabot PR",
        "workflow_run",
        verify_run("pull_request", branch="dependabot/pip/ruff-0.18", actor="dependabot[bot]"),
        untrusted=True,
        author="dependabot[bot]",
    ),
    Scenario(
        "verify done for a PR by an author without write access",
        "workflow_run",
        verify_run("pull_request", branch="feature"),
        untrusted=True,
        author="outsider",
    ),
    Scenario(
        "verify done for a maintainer's re-run of a bot's PR",
        "workflow_run",
        verify_run("pull_request", branch="bump", actor="renovate[bot]"),
        untrusted=True,
        author="renovate[bot]",
    ),
    Scenario(
        "a workflow named verify in another file",
        "workflow_run",
        verify_run("pull_request", branch="feature", path=".github/workflows/evil.yml"),
        untrusted=True,
    ),
    Scenario(
        "maintainer approves the head",
        "issue_comment",
        comment(f"/gpu-approve {HEAD}", "maintainer"),
        untrusted=True,
        approved=True,
        author="someone",
    ),
    Scenario(
        "maintainer approves an old SHA",
        "issue_comment",
        comment(f"/gpu-approve {OTHER}", "maintainer"),
        untrusted=True,
    ),
    Scenario(
        "outsider approves the head",
        "issue_comment",
        comment(f"/gpu-approve {HEAD}", "outsider"),
        untrusted=True,
    ),
    Scenario(
        "a bot approves the head",
        "issue_comment",
        comment(f"/gpu-approve {HEAD}", "github-actions[bot]"),
        untrusted=True,
        writers={"maintainer", "github-actions[bot]"},
    ),
    Scenario(
        "approval text inside a longer comment",
        "issue_comment",
        comment(f"LGTM\n/gpu-approve {HEAD}", "maintainer"),
        untrusted=True,
    ),
    Scenario(
        "approval on an issue",
        "issue_comment",
        comment(f"/gpu-approve {HEAD}", "maintainer", on_pull=False),
        untrusted=True,
    ),
    Scenario("an ordinary comment", "issue_comment", comment("looks good", "outsider"), True),
    Scenario(
        "a short SHA", "issue_comment", comment(f"/gpu-approve {HEAD[:7]}", "maintainer"), True
    ),
    Scenario(
        "maintainer dispatches the GPU run",
        "workflow_dispatch",
        dispatch(),
        approved=True,
    ),
    Scenario(
        "dispatch from a feature branch",
        "workflow_dispatch",
        dispatch(),
        ref="refs/heads/feature",
        workflow_ref=f"{REPO}/.github/workflows/gpu.yml@refs/heads/feature",
        untrusted=True,
    ),
    Scenario(
        "an approval read by a copy of gpu.yml on a branch",
        "issue_comment",
        comment(f"/gpu-approve {HEAD}", "maintainer"),
        workflow_ref=f"{REPO}/.github/workflows/gpu.yml@refs/heads/feature",
        untrusted=True,
        author="someone",
    ),
    Scenario("the monthly image rebuild", "schedule", {"schedule": "23 4 1 * *"}),
]
BY_NAME = {s.name: s for s in SCENARIOS}


def triggered(doc: Mapping[str, Any], s: Scenario) -> bool:
    """Whether ``doc``'s `on:` starts a run for the scenario's event."""
    on = doc["on"]
    if isinstance(on, str | list):
        return s.event_name in ([on] if isinstance(on, str) else on)
    if s.event_name not in on:
        return False
    if s.event_name == "schedule":  # each workflow at its own times
        return True
    spec = on[s.event_name] or {}
    types = set(spec.get("types") or DEFAULT_TYPES.get(s.event_name, ()))
    if types and s.payload.get("action") not in types:
        return False
    if s.event_name == "workflow_run":
        return s.payload["workflow_run"]["name"] in spec["workflows"]
    if s.event_name == "push" and "branches" in spec:
        return s.ref.removeprefix("refs/heads/") in spec["branches"]
    return True


def needs_of(job: Mapping[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def gate(s: Scenario) -> gpu_gate.Decision:
    """gpu_gate.py's decision for the scenario, with its writers and pull request."""
    ctx = gpu_gate.Context(REPO, "main", s.workflow_ref, s.ref, HEAD)
    pull = {"state": "open", "head": {"sha": HEAD}, "user": {"login": s.author}}
    return gpu_gate.decide(
        s.event_name,
        s.payload,
        ctx,
        lambda user: "write" if user in s.writers else "read",
        lambda number: pull,
        lambda sha: s.head_passed and sha == HEAD,
    )


def _outputs(doc_name: str, job_name: str, s: Scenario) -> dict[str, str]:
    if (doc_name, job_name) != ("gpu.yml", "authorize"):
        return {}
    decision = gate(s)
    run = "true" if decision.run else "false"
    pending = gpu_gate.pending_description(decision)
    return {"run": run, "sha": decision.sha, "image": IMAGE if decision.run else "",
            "pending": pending}  # fmt: skip


def jobs_that_run(doc_name: str, s: Scenario) -> dict[str, bool]:
    """Every job of the workflow: True when it runs (its needs succeeded, or `if:` said so)."""
    doc = DOCS[doc_name]
    ran: dict[str, bool] = {}
    needs_ctx: dict[str, Any] = {}
    for name, job in doc["jobs"].items():  # jobs are listed after the jobs they need
        needed = needs_of(job)
        ctx = {**s.context(), "needs": {n: needs_ctx[n] for n in needed}}
        ok = all(ran[n] for n in needed)
        ran[name] = job_runs(job.get("if"), ctx, ok)
        needs_ctx[name] = {
            "result": "success" if ran[name] else "skipped",
            "outputs": _outputs(doc_name, name, s) if ran[name] else {},
        }
    return ran


def self_hosted(job: Mapping[str, Any]) -> bool:
    runs_on = job.get("runs-on")
    labels = [runs_on] if isinstance(runs_on, str) else list(runs_on or [])
    return "self-hosted" in labels


def reaches_gpu(where: str, job: Mapping[str, Any]) -> bool:
    """A job on a self-hosted runner, or the one that dispatches to the GPU runner's
    repository (test_gpu_dispatch.py: nothing else reaches it)."""
    return self_hosted(job) or "gpu_dispatch.py send" in str(job.get("steps"))


def runs_of(s: Scenario) -> list[tuple[str, Mapping[str, Any], bool]]:
    """(workflow:job, job, whether it runs) for every job of every workflow ``s`` starts."""
    out = []
    for doc_name, doc in DOCS.items():
        if triggered(doc, s):
            ran = jobs_that_run(doc_name, s)
            out += [(f"{doc_name}:{n}", job, ran[n]) for n, job in doc["jobs"].items()]
    return out


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.name)
def test_untrusted_code_never_reaches_the_gpu_runner_unapproved(s: Scenario) -> None:
    for where, job, ran in runs_of(s):
        if reaches_gpu(where, job) and ran:
            assert not s.untrusted or s.approved, f"{where} runs untrusted code on {s.name}"


@pytest.mark.parametrize(
    "name",
    [
        "push to main",
        "verify done for a merge queue entry",
        "verify done for a maintainer's PR",
        "maintainer dispatches the GPU run",
        "maintainer approves the head",
    ],
)
def test_trusted_commits_run_the_gpu_stage(name: str) -> None:
    assert jobs_that_run("gpu.yml", BY_NAME[name])["dispatch"], name


def test_only_a_push_to_main_can_become_the_baseline() -> None:
    baselines = [s.name for s in SCENARIOS if triggered(DOCS["gpu.yml"], s) and gate(s).baseline]
    assert baselines == ["push to main"]


def test_ordinary_comments_stop_before_the_gate_runs() -> None:
    s = BY_NAME["an ordinary comment"]
    assert triggered(DOCS["gpu.yml"], s)
    assert not any(jobs_that_run("gpu.yml", s).values())


@pytest.mark.parametrize(
    "name",
    [
        "verify done for a fork PR",
        "verify done for a Dependabot PR",
        "verify done for a PR by an author without write access",
        "verify done for a maintainer's re-run of a bot's PR",
    ],
)
def test_untrusted_pull_requests_wait_with_a_pending_status(name: str) -> None:
    decision = gate(BY_NAME[name])
    assert not decision.run and decision.pending and decision.sha == HEAD
    assert f"/gpu-approve {HEAD}" in decision.reason


def test_workflows_that_reach_the_gpu_runner_only_run_the_default_branch_definition() -> None:
    # pull_request(_target) and pushes to other branches run a file the change itself may edit.
    for doc_name, doc in DOCS.items():
        assert "pull_request_target" not in doc["on"], doc_name
        if any(reaches_gpu(doc_name, job) for job in doc["jobs"].values()):
            assert set(doc["on"]) <= DEFAULT_BRANCH_EVENTS | {"push"}, doc_name
            assert doc["on"].get("push", {}) == {"branches": ["main"]}, doc_name


def test_the_image_is_built_only_on_main_in_its_protected_environment() -> None:
    for name, doc in DOCS.items():
        for job_name, job in doc["jobs"].items():
            publishes = (job.get("permissions") or {}).get("packages") == "write"
            runs = " ".join(step.get("run", "") for step in job["steps"])
            assert publishes == ("image.sh publish" in runs), (name, job_name)
            if publishes:
                assert (name, job.get("environment")) == ("image.yml", "ci-image")
                assert job["if"] == "github.ref == 'refs/heads/main'"
    image = DOCS["image.yml"]
    assert set(image["on"]) == {"push", "schedule", "workflow_dispatch"}
    assert image["on"]["push"]["branches"] == ["main"]
    for s in SCENARIOS:
        if triggered(image, s):
            ran = jobs_that_run("image.yml", s)["publish"]
            assert not ran or s.ref == "refs/heads/main", s.name


def test_every_expression_in_every_workflow_parses_and_evaluates() -> None:
    s = BY_NAME["pull_request opened (fork)"]
    ctx = {**s.context(), "needs": {}, "steps": {}, "inputs": {}, "runner": {"temp": "/t"}}
    texts = re.findall(
        r"\$\{\{(.*?)\}\}", "\n".join(p.read_text() for p in WORKFLOWS.glob("*.yml"))
    )
    conditions = [
        step_or_job.get("if")
        for doc in DOCS.values()
        for job in doc["jobs"].values()
        for step_or_job in [job, *job["steps"]]
        if step_or_job.get("if")
    ]
    assert texts and conditions
    for text in [*texts, *conditions]:
        evaluate(str(text), ctx)  # raises SyntaxError on anything the language does not allow
