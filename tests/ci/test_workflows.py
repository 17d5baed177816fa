"""The workflow files: job graph, fork safety, permissions and pinning, checked structurally."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    return doc


VERIFY = load("verify.yml")
COMMENT = load("pr-comment.yml")
JOBS = VERIFY["jobs"]


# --- a small evaluator for the `if:` expressions, to try them on event payloads ---------

_TOKEN = re.compile(r"\s*(\(|\)|&&|\|\||==|!=|!|'[^']*'|[A-Za-z_][\w.\-\[\]]*)")


def evaluate(expression: str, context: dict[str, Any]) -> Any:
    tokens = _TOKEN.findall(expression.strip())
    assert "".join(tokens).replace(" ", "") == re.sub(r"\s", "", expression), "unparsed text"
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def value(token: str) -> Any:
        if token.startswith("'"):
            return token[1:-1]
        if token == "always()":
            return True
        node: Any = context
        for part in token.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def atom() -> Any:
        token = take()
        if token == "(":
            result = either()
            assert take() == ")"
            return result
        if token == "!":
            return not atom()
        if token == "always" and peek() == "(":
            take(), take()
            return True
        return value(token)

    def compare() -> Any:
        left = atom()
        while peek() in ("==", "!="):
            op, right = take(), atom()
            left = (left == right) if op == "==" else (left != right)
        return left

    def both() -> Any:
        left = compare()
        while peek() == "&&":
            take()
            right = compare()
            left = left and right
        return left

    def either() -> Any:
        left = both()
        while peek() == "||":
            take()
            right = both()
            left = left or right
        return left

    result = either()
    assert pos == len(tokens)
    return result


def event(
    name: str, action: str | None = None, fork: bool = False, label: str | None = None
) -> dict:
    repo = "owner/amptrain"
    ctx: dict[str, Any] = {"github": {"event_name": name, "repository": repo, "event": {}}}
    if name == "pull_request":
        ctx["github"]["event"] = {
            "action": action,
            "pull_request": {"head": {"repo": {"full_name": "someone/amptrain" if fork else repo}}},
            **({"label": {"name": label}} if label else {}),
        }
    return ctx


GPU_IF = JOBS["gpu-benchmark"]["if"]


@pytest.mark.parametrize(
    ("ctx", "runs"),
    [
        (event("push"), True),
        (event("workflow_dispatch"), True),
        (event("pull_request", "opened"), True),
        (event("pull_request", "synchronize"), True),
        (event("pull_request", "opened", fork=True), False),
        (event("pull_request", "synchronize", fork=True), False),
        (event("pull_request", "reopened", fork=True), False),
        (event("pull_request", "labeled", fork=True, label="gpu-approved"), True),
        (event("pull_request", "labeled", fork=True, label="documentation"), False),
        (event("pull_request", "labeled", fork=False, label="documentation"), False),
    ],
)
def test_the_gpu_job_never_runs_fork_code_unless_a_maintainer_approved(
    ctx: dict, runs: bool
) -> None:
    assert bool(evaluate(GPU_IF, ctx)) is runs


def test_the_gpu_job_checks_out_the_exact_commit_of_the_event() -> None:
    checkout = JOBS["gpu-benchmark"]["steps"][0]
    assert checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"]["ref"] == "${{ github.sha }}"


def test_the_gpu_job_runs_on_the_self_hosted_gpu_runner_with_all_gpus() -> None:
    job = JOBS["gpu-benchmark"]
    assert job["runs-on"] == ["self-hosted", "linux", "x64", "gpu"]
    declared = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())
    assert "gpu" in declared["self-hosted-runner"]["labels"]
    run = " ".join(s.get("run", "") for s in job["steps"])
    assert "--gpus all" in run and "nox -s benchmark" in run
    assert job["timeout-minutes"] <= 60


def test_the_report_job_needs_both_stage_jobs_and_always_runs() -> None:
    report = JOBS["report"]
    assert set(report["needs"]) == {"cpu-stages", "gpu-benchmark"}
    assert report["if"].startswith("always()")
    assert evaluate(report["if"], event("pull_request", "synchronize", fork=True))
    assert not evaluate(report["if"], event("pull_request", "labeled", label="documentation"))
    run = " ".join(s.get("run", "") for s in report["steps"])
    assert "-s report" in run and "--github" in run
    for stage in ("static", "execution", "integration", "performance"):
        assert f"--require {stage}" in run


def test_raw_results_are_uploaded_even_when_a_stage_fails() -> None:
    for job, artifact in (
        ("cpu-stages", "raw-cpu"),
        ("gpu-benchmark", "raw-gpu"),
        ("report", "verification-reports"),
    ):
        uploads = [
            s
            for s in JOBS[job]["steps"]
            if "upload-artifact" in s.get("uses", "") and s["with"]["name"] == artifact
        ]
        assert uploads and uploads[0]["if"].startswith("always()"), job


def test_a_push_to_main_keeps_the_benchmark_as_the_baseline() -> None:
    (keep,) = [
        s
        for s in JOBS["gpu-benchmark"]["steps"]
        if s.get("with", {}).get("name") == "benchmark-baseline"
    ]
    assert evaluate(keep["if"], {"github": {"event_name": "push", "ref": "refs/heads/main"}})
    assert not evaluate(
        keep["if"], {"github": {"event_name": "pull_request", "ref": "refs/pull/1/merge"}}
    )


def test_triggers_and_concurrency() -> None:
    assert set(VERIFY["on"]) == {"pull_request", "push", "workflow_dispatch"}
    assert VERIFY["on"]["push"]["branches"] == ["main"]
    assert VERIFY["concurrency"]["cancel-in-progress"] is True


ALLOWED = {
    ("verify.yml", "cpu-stages"): {"contents": "read"},
    ("verify.yml", "gpu-benchmark"): {"contents": "read"},
    ("verify.yml", "report"): {"contents": "read", "actions": "read"},
    ("pr-comment.yml", "comment"): {"actions": "read", "pull-requests": "write"},
}


@pytest.mark.parametrize("name", ["verify.yml", "pr-comment.yml"])
def test_permissions_are_empty_at_the_top_and_minimal_per_job(name: str) -> None:
    doc = load(name)
    assert doc["permissions"] == {}
    for job_name, job in doc["jobs"].items():
        assert job["permissions"] == ALLOWED[(name, job_name)], job_name
        assert "timeout-minutes" in job


PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+(\.\d+)*$")


@pytest.mark.parametrize("name", ["verify.yml", "pr-comment.yml"])
def test_every_action_is_pinned_by_full_sha_with_its_version(name: str) -> None:
    lines = [line.strip() for line in (WORKFLOWS / name).read_text().splitlines()]
    uses = [
        re.sub(r"^- ", "", line)[len("uses: ") :]
        for line in lines
        if re.sub(r"^- ", "", line).startswith("uses: ")
    ]
    assert uses
    for ref in uses:
        assert PINNED.match(ref), ref


def test_checkouts_do_not_persist_credentials() -> None:
    for job in JOBS.values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_the_comment_workflow_never_checks_out_or_runs_pull_request_code() -> None:
    assert COMMENT["on"]["workflow_run"] == {"workflows": ["verify"], "types": ["completed"]}
    (job,) = COMMENT["jobs"].values()
    assert not any("checkout" in s.get("uses", "") for s in job["steps"])
    assert not any("run" in s for s in job["steps"])  # only the pinned actions, no shell
    script = next(s for s in job["steps"] if "github-script" in s.get("uses", ""))["with"]["script"]
    assert "pr.head.sha !== process.env.HEAD_SHA" in script  # the artifact is not trusted
    assert "<!-- stagegate:verification-report -->" in script


def test_no_expression_is_expanded_inside_a_shell_script() -> None:
    for doc in (VERIFY, COMMENT):
        for job in doc["jobs"].values():
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), step.get("name")
