"""The workflows under every event that can reach them: which run, which jobs run, and whether
code under test can reach the GPU runner unapproved, write a status, or run a script of its own
where the default branch's scripts are meant to run.

Triggers are matched as GitHub matches them and every `if:` is evaluated by the expression
language (tests/ci/gha_expressions.py); gpu.yml's admission is tools/ci/gpu_gate.py itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

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
# The workflows that hold write permissions; none runs for a pull request.
TRUSTED = ("judge.yml", "gpu.yml", "image.yml", "sweep.yml")


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
            "pull_requests": [] if fork or kind != "pull_request" else [{"number": 7}],
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
    Scenario("verify done for a merge queue entry", "workflow_run", verify_run("merge_group")),
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
    )


def _outputs(doc_name: str, job_name: str, s: Scenario) -> dict[str, str]:
    if (doc_name, job_name) != ("gpu.yml", "authorize"):
        return {}
    decision = gate(s)
    run = "true" if decision.run else "false"
    return {"run": run, "sha": decision.sha, "image": IMAGE if decision.run else ""}


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
        if self_hosted(job) and ran:
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
    assert jobs_that_run("gpu.yml", BY_NAME[name])["benchmark"], name


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
        if any(self_hosted(job) for job in doc["jobs"].values()):
            assert set(doc["on"]) <= DEFAULT_BRANCH_EVENTS | {"push"}, doc_name
            assert doc["on"].get("push", {}) == {"branches": ["main"]}, doc_name


@pytest.mark.parametrize("name", sorted(DOCS))
def test_only_default_branch_workflows_hold_write_permissions(name: str) -> None:
    doc = DOCS[name]
    writes = {
        scope
        for job in doc["jobs"].values()
        for scope, level in (job.get("permissions") or {}).items()
        if level == "write"
    }
    if name not in TRUSTED:
        assert not writes, f"{name} runs the change's code and asks for {writes}"
    else:  # never started by a pull request, nor by a push to any branch but main
        assert not {"pull_request", "pull_request_target", "merge_group"} & set(doc["on"])
        assert doc["on"].get("push", {}).get("branches", ["main"]) == ["main"]


def test_only_the_gate_scripts_set_commit_statuses() -> None:
    for name, doc in DOCS.items():
        for job in doc["jobs"].values():
            if (job.get("permissions") or {}).get("statuses") != "write":
                continue
            assert name in ("judge.yml", "gpu.yml", "sweep.yml"), name
            scripts = " ".join(step.get("run", "") for step in job["steps"])
            assert re.search(r"tools/ci/(verdict_status|gpu_gate|status_sweep)\.py", scripts)


def _checkouts(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")]


@pytest.mark.parametrize("name", ["judge.yml", "gpu.yml", "sweep.yml"])
def test_trusted_jobs_run_only_the_default_branch_scripts(name: str) -> None:
    for job_name, job in DOCS[name]["jobs"].items():
        for step in _checkouts(job):
            ref = step.get("with", {}).get("ref")
            if step["with"].get("path") == "pr":  # the commit under test, as data
                assert (name, job_name) == ("gpu.yml", "benchmark")
                continue
            assert ref in (None, "${{ github.event.repository.default_branch }}"), job_name
            if ref is None:  # no ref is the default branch only on these events
                assert set(DOCS[name]["on"]) <= {"workflow_run", "schedule"}, job_name


def test_the_gpu_host_runs_the_commit_only_inside_the_pinned_image() -> None:
    job = DOCS["gpu.yml"]["jobs"]["benchmark"]
    assert job["permissions"] == {"contents": "read"}
    assert "secrets." not in yaml.safe_dump(job)
    paths = [step["with"].get("path") for step in _checkouts(job)]
    assert paths == ["trusted", "pr"]
    scripts = [step["run"] for step in job["steps"] if "run" in step]
    text = "\n".join(scripts)
    assert "trusted/tools/ci/gpu_stage.sh pr " in text
    for forbidden in ("docker build", "image.sh", "nox", "pr/", "./pr", "bash pr", "source"):
        assert forbidden not in text, forbidden
    assert "./trusted/stagegate" in text  # the host's stagegate is the default branch's
    run = next(s for s in job["steps"] if "gpu_stage.sh" in s.get("run", ""))
    assert run["env"]["IMAGE"] == "${{ needs.authorize.outputs.image }}"
    image = DOCS["gpu.yml"]["jobs"]["authorize"]["steps"]
    assert any("trusted_artifacts.py image" in s.get("run", "") for s in image)


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


def test_the_pull_request_workflow_only_uploads_raw_results() -> None:
    (job,) = DOCS["verify.yml"]["jobs"].values()
    text = yaml.safe_dump(job)
    assert "stagegate report" not in text and "nox -s report" not in text
    uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert [u["with"]["name"] for u in uploads] == ["raw-cpu"]


@pytest.mark.parametrize(("doc", "job"), [("judge.yml", "judge"), ("gpu.yml", "status")])
def test_the_judges_read_artifacts_only_through_the_layout_check(doc: str, job: str) -> None:
    steps = DOCS[doc]["jobs"][job]["steps"]
    raw = next(s for s in steps if s.get("with", {}).get("name", "").startswith("raw-"))
    judge = next(s for s in steps if "judge_records.py" in s.get("run", ""))
    assert f'--artifact "$RUNNER_TEMP/{raw["with"]["path"].split("/")[-1]}"' in judge["run"]
    assert "--pyproject" not in judge["run"]  # judge_records passes the base checkout's own
    assert "--base ." in judge["run"] and "--changed-files" in judge["run"]
    assert judge["env"]["STAGEGATE"].endswith("/stagegate stagegate")


def test_baselines_and_images_are_looked_up_only_among_the_default_branch_runs() -> None:
    lookups = [
        " ".join(step["run"].split())
        for doc in DOCS.values()
        for job in doc["jobs"].values()
        for step in job["steps"]
        if "trusted_runs.py" in step.get("run", "")
    ]
    image = (
        "--workflow image.yml --events push,workflow_dispatch,schedule"
        " --artifact verification-image"
    )
    baseline = "--workflow gpu.yml --events push --artifact benchmark-baseline"
    assert sorted(lookups) == sorted(
        [f"python3 tools/ci/trusted_runs.py {image}"] * 2
        + [f"python3 tools/ci/trusted_runs.py {baseline}"]
    )


ALLOWED = {
    ("verify.yml", "stages"): {"contents": "read", "actions": "read"},
    ("judge.yml", "pending"): {"contents": "read", "actions": "read", "statuses": "write"},
    ("judge.yml", "judge"): {"contents": "read", "actions": "read", "pull-requests": "read"},
    ("judge.yml", "report"): {"contents": "read", "statuses": "write"},
    ("judge.yml", "comment"): {"pull-requests": "write"},
    ("sweep.yml", "sweep"): {"contents": "read", "pull-requests": "read", "statuses": "write"},
    ("gpu.yml", "authorize"): {
        "contents": "read", "pull-requests": "read", "actions": "read", "statuses": "write",
    },
    ("gpu.yml", "benchmark"): {"contents": "read"},
    ("gpu.yml", "status"): {"contents": "read", "actions": "read", "statuses": "write"},
    ("gpu.yml", "authorize-failed"): {"contents": "read", "statuses": "write"},
    ("image.yml", "publish"): {"contents": "read", "packages": "write"},
    ("mutation.yml", "mutation"): {"contents": "read"},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(DOCS))
def test_permissions_are_empty_at_the_top_and_minimal_per_job(name: str) -> None:
    doc = DOCS[name]
    assert doc["permissions"] == {}
    for job_name, job in doc["jobs"].items():
        assert job["permissions"] == ALLOWED[(name, job_name)], job_name
        assert "timeout-minutes" in job


def test_mutation_testing_runs_weekly_and_uploads_its_report() -> None:
    triggers = DOCS["mutation.yml"]["on"]
    assert set(triggers) == {"schedule", "workflow_dispatch"}  # never a merge gate: hours long
    (cron,) = (entry["cron"] for entry in triggers["schedule"])
    assert cron.split()[2:] == ["*", "*", "1"]  # once a week
    steps = DOCS["mutation.yml"]["jobs"]["mutation"]["steps"]
    assert any("nox" in step.get("run", "") and "-s mutation" in step["run"] for step in steps)
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/mutation"


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
            for step in _checkouts(job):
                assert step["with"]["persist-credentials"] is False


def test_no_expression_is_expanded_inside_a_shell_script() -> None:
    for doc in DOCS.values():
        for job in doc["jobs"].values():
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), step.get("name")


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


def test_the_comment_job_never_checks_out_or_runs_pull_request_code() -> None:
    job = DOCS["judge.yml"]["jobs"]["comment"]
    assert not _checkouts(job) and not any("run" in s for s in job["steps"])
    download = next(s for s in job["steps"] if "download-artifact" in s.get("uses", ""))
    assert "run-id" not in download["with"]  # this run's own artifact, from the base stagegate
    script = next(s for s in job["steps"] if "github-script" in s.get("uses", ""))["with"]["script"]
    assert "pr.head.sha !== process.env.HEAD_SHA" in script
    assert "<!-- stagegate:verification-report -->" in script
    assert job["steps"][1]["env"]["PR_NUMBER"] == "${{ needs.judge.outputs.pr }}"
