"""Decides whether a commit may run on the self-hosted GPU runner: the first job of gpu.yml.

    python tools/ci/gpu_gate.py            # reads the event; writes run=, sha=, pr=, baseline=,
                                           # base=
    python tools/ci/gpu_gate.py --subject  # prints the commit the event is about, if any

Nothing is decided unless the running workflow is the default branch's own gpu.yml
(GITHUB_WORKFLOW_REF, which no workflow can set): a copy on another ref, or a manual run
dispatched from another ref, runs nothing. Then a commit runs when it was pushed to the default
branch (the only runs whose results may become the regression baseline), is a merge-queue
entry into it whose pull request's head passed on the GPU (as admitted or approved), was
dispatched with its SHA by someone with write access, or is the head of a pull request into
the default branch from this repository whose author and pusher both have write access and
are not bots.
Every other pull request, forks', Dependabot's and those of authors without write access, is
treated as a fork's: it gets a pending "gpu verification" status and runs only when someone
with write access comments ``/gpu-approve <full SHA>`` while that SHA is still its head.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from github_api import RestApi, read_event, write_outputs
from verdict_status import DESCRIPTION_LIMIT, GPU, RUNNING

STATUS_CONTEXT = GPU
WORKFLOW = ".github/workflows/gpu.yml"
VERIFY = ".github/workflows/verify.yml"
APPROVE = re.compile(r"/gpu-approve\s+([0-9a-f]{40})")
QUEUE = re.compile(r"gh-readonly-queue/(?P<base>.+)/pr-(?P<number>\d+)-(?P<sha>[0-9a-f]{40})")
SHA = re.compile(r"[0-9a-f]{40}")
WRITERS = {"admin", "maintain", "write"}

Permission = Callable[[str], str]
PullOf = Callable[[int], Mapping[str, Any]]
Passed = Callable[[str], bool]  # whether a commit's "gpu verification" from the App is success


@dataclass(frozen=True)
class Context:
    """Where the decision is made: the repository and what GitHub says is running."""

    repo: str
    default_branch: str
    workflow_ref: str  # GITHUB_WORKFLOW_REF: OWNER/REPO/.github/workflows/FILE@REF
    ref: str  # GITHUB_REF
    sha: str = ""  # GITHUB_SHA: the pushed commit, for a push


@dataclass(frozen=True)
class Decision:
    run: bool
    sha: str = ""
    reason: str = ""
    pending: bool = False  # mark the SHA pending: its commit waits for approval
    pr: int | None = None
    baseline: bool = False  # a push to the default branch: its result may become the baseline


def own_workflow(ctx: Context) -> str | None:
    """Why this is not the default branch's gpu.yml, or None."""
    expected = f"{ctx.repo}/{WORKFLOW}@refs/heads/{ctx.default_branch}"
    if ctx.workflow_ref != expected:
        return f"running {ctx.workflow_ref!r}, not {expected}: nothing runs"
    return None


def _maintainer(login: str | None, permission_of: Permission) -> bool:
    """A person (not a bot: Dependabot's commits count as a fork's) with write access."""
    return bool(login) and not str(login).endswith("[bot]") and permission_of(login) in WRITERS


def _untrusted_pull(run: Mapping[str, Any], ctx: Context, permission_of: Permission,
                    pull_of: PullOf) -> str | None:  # fmt: skip
    """Why a verify run's pull request counts as a fork's, or None when it may run."""
    if (run.get("head_repository") or {}).get("full_name") != ctx.repo:
        return "a fork's pull request"
    if str(run.get("head_branch", "")).startswith("dependabot/"):
        return "a Dependabot pull request"
    for who in ("actor", "triggering_actor"):
        login = (run.get(who) or {}).get("login")
        if not _maintainer(login, permission_of):
            return f"started by {login!r}, who is a bot or has no write access"
    pulls = [p for p in run.get("pull_requests") or []
             if ((p.get("base") or {}).get("ref")) == ctx.default_branch]  # fmt: skip
    if not pulls:
        return f"no pull request of this repository into {ctx.default_branch} lists the commit"
    for pull in pulls:
        author = (pull_of(int(pull["number"])).get("user") or {}).get("login")
        if not _maintainer(author, permission_of):
            return f"pull request #{pull['number']} is by {author!r}, a bot or without write access"
    return None


def _from_queue(run: Mapping[str, Any], ctx: Context, pull_of: PullOf,
                passed: Passed) -> Decision:  # fmt: skip
    """A merge-queue entry runs only when the head it was queued with passed on the GPU (was
    admitted, or approved, and succeeded) and is still its pull request's head."""
    sha = run["head_sha"]
    entry = QUEUE.fullmatch(str(run.get("head_branch", "")))
    if entry is None or entry["base"] != ctx.default_branch:
        return Decision(False, sha, f"{run.get('head_branch')!r} is no queue entry into main")
    head, number = entry["sha"], int(entry["number"])
    if (pull_of(number).get("head") or {}).get("sha") != head:
        return Decision(False, sha, f"pull request #{number}'s head is no longer {head[:12]}")
    if not passed(head):
        return Decision(False, sha, f"its head {head[:12]} has no passing GPU check: run it first")
    return Decision(True, sha, f"merge queue entry of #{number}, whose head passed on the GPU")


def _from_verify_run(event: Mapping[str, Any], ctx: Context, permission_of: Permission,
                     pull_of: PullOf, passed: Passed) -> Decision:  # fmt: skip
    run = event["workflow_run"]
    sha, kind = run["head_sha"], run["event"]
    if run.get("path") != VERIFY:
        return Decision(False, sha, f"{run.get('path')!r} is not {VERIFY}")
    if kind == "merge_group":
        return _from_queue(run, ctx, pull_of, passed)
    if kind != "pull_request":
        return Decision(False, sha, f"verify ran for {kind}: gpu.yml's own triggers cover it")
    listed = run.get("pull_requests") or []
    if listed and not any((p.get("base") or {}).get("ref") == ctx.default_branch for p in listed):
        # a pull request into another branch: its run must not touch the head's GPU check
        return Decision(False, sha, f"not a pull request into {ctx.default_branch}")
    number = next((int(p["number"]) for p in run.get("pull_requests") or []
                   if (p.get("base") or {}).get("ref") == ctx.default_branch), None)  # fmt: skip
    why = _untrusted_pull(run, ctx, permission_of, pull_of)
    if why:
        return Decision(False, sha, f"{why}: waiting for /gpu-approve {sha}", True, number)
    return Decision(True, sha, "pull request by a maintainer from this repository", pr=number)


def _from_comment(event: Mapping[str, Any], permission_of: Permission, pull_of: PullOf) -> Decision:
    issue, comment = event["issue"], event["comment"]
    if "pull_request" not in issue:
        return Decision(False, reason="a comment on an issue, not a pull request")
    match = APPROVE.fullmatch(comment["body"].strip())
    if match is None:
        return Decision(False, reason="not an approval comment")
    sha, user = match.group(1), comment["user"]["login"]
    if not _maintainer(user, permission_of):
        return Decision(False, sha, f"{user} is a bot or has no write access to approve GPU runs")
    pull = pull_of(issue["number"])
    if pull["state"] != "open":
        return Decision(False, sha, "the pull request is not open")
    if pull["head"]["sha"] != sha:
        return Decision(False, sha, f"the head moved to {pull['head']['sha']}: approve it again")
    return Decision(True, sha, f"approved by {user}", pr=int(issue["number"]))


def _from_dispatch(event: Mapping[str, Any], permission_of: Permission) -> Decision:
    sha = str((event.get("inputs") or {}).get("sha", "")).strip()
    if SHA.fullmatch(sha) is None:
        return Decision(False, reason=f"input sha {sha!r} is not a full 40-character SHA")
    user = event["sender"]["login"]
    if not _maintainer(user, permission_of):
        return Decision(False, sha, f"{user} is a bot or has no write access")
    return Decision(True, sha, f"dispatched by {user}")


def decide(event_name: str, event: Mapping[str, Any], ctx: Context, permission_of: Permission,
           pull_of: PullOf, passed: Passed = lambda sha: False) -> Decision:  # fmt: skip
    """Whether gpu.yml's benchmark runs for this event, and on which commit."""
    why = own_workflow(ctx)
    if why:
        return Decision(False, reason=why)
    default_ref = f"refs/heads/{ctx.default_branch}"
    if event_name in ("push", "workflow_dispatch") and ctx.ref != default_ref:
        return Decision(False, reason=f"{event_name} on {ctx.ref}, not {default_ref}: refused")
    if event_name == "push":
        return Decision(True, ctx.sha, f"pushed to {ctx.default_branch}", baseline=True)
    if event_name == "workflow_run":
        return _from_verify_run(event, ctx, permission_of, pull_of, passed)
    if event_name == "issue_comment":
        return _from_comment(event, permission_of, pull_of)
    if event_name == "workflow_dispatch":
        return _from_dispatch(event, permission_of)
    return Decision(False, reason=f"{event_name} never runs the GPU benchmark")


def gpu_passed(api: Any, repo: str, sha: str, app_login: str) -> bool:
    """Whether the gate App's newest "gpu verification" on ``sha`` is success."""
    for status in api.get(f"/repos/{repo}/commits/{sha}/statuses", per_page=100):
        if (
            status.get("context") == STATUS_CONTEXT
            and (status.get("creator") or {}).get("login") == app_login
        ):
            return status.get("state") == "success"
    return False


def base_commit(decision: Decision, ctx: Context, get: Callable[[str], Any]) -> str:
    """The commit the A/B regression stage measures the head against: a push's first parent
    (what the default branch was before it), else the merge base of the default branch and
    the commit (what a pull request changes). "" when there is none: the stage then does not
    run, and the judge, which requires it, blocks."""
    if decision.baseline:
        parents = get(f"/repos/{ctx.repo}/commits/{decision.sha}").get("parents") or []
        sha = str(parents[0].get("sha", "")) if parents else ""
    else:
        compare = get(f"/repos/{ctx.repo}/compare/{ctx.default_branch}...{decision.sha}")
        sha = str((compare.get("merge_base_commit") or {}).get("sha", ""))
    return sha if SHA.fullmatch(sha) else ""


def subject(event_name: str, event: Mapping[str, Any], github_sha: str) -> str:
    """The commit an event asks to benchmark, read from the event alone (no API): where an
    error is reported when the authorize job itself fails. Comments name none: anyone can
    write one."""
    if event_name == "workflow_run":
        sha = str(event["workflow_run"]["head_sha"])
    elif event_name == "workflow_dispatch":
        sha = str((event.get("inputs") or {}).get("sha", "")).strip()
    elif event_name == "push":
        sha = github_sha
    else:
        sha = ""
    return sha if SHA.fullmatch(sha) else ""


def pending_description(decision: Decision) -> str:
    """What the "gpu verification" check says while its commit waits for approval or runs
    (the gate App's job posts it); "" when the decision marks nothing."""
    if decision.pending:
        return decision.reason[:DESCRIPTION_LIMIT]
    return RUNNING if decision.run else ""


def main(argv: list[str] | None = None) -> int:
    """Decide for the running event; write the job's outputs (the commit is marked pending
    by the gate App's job, which holds the only token that sets the check).
    With --subject, print only the commit the event is about (see subject())."""
    env = os.environ
    repo, event = env["GITHUB_REPOSITORY"], read_event()
    if (argv if argv is not None else sys.argv[1:]) == ["--subject"]:
        print(subject(env["GITHUB_EVENT_NAME"], event, env.get("GITHUB_SHA", "")))
        return 0
    api = RestApi()
    ctx = Context(
        repo, event["repository"]["default_branch"], env["GITHUB_WORKFLOW_REF"],
        env["GITHUB_REF"], env.get("GITHUB_SHA", ""),
    )  # fmt: skip
    decision = decide(
        env["GITHUB_EVENT_NAME"], event, ctx,
        lambda user: api.get(f"/repos/{repo}/collaborators/{user}/permission")["permission"],
        lambda number: api.get(f"/repos/{repo}/pulls/{number}"),
        lambda sha: gpu_passed(api, repo, sha, f"{env.get('GATE_APP_SLUG', '')}[bot]"),
    )  # fmt: skip
    print(json.dumps(decision.__dict__))
    base = base_commit(decision, ctx, api.get) if decision.run else ""
    write_outputs({
        "run": "true" if decision.run else "false", "sha": decision.sha,
        "pr": str(decision.pr or ""), "baseline": "true" if decision.baseline else "false",
        "base": base, "pending": pending_description(decision),
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
