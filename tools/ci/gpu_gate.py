"""Decides whether a commit may run on the self-hosted GPU runner: the first job of gpu.yml.

    python tools/ci/gpu_gate.py      # in GitHub Actions: reads the event, writes run= and sha=

gpu.yml runs from the default branch whatever triggers it, so this file and the workflow are
the default branch's, never a pull request's. A commit runs when it was pushed to the default
branch, dispatched by someone with write access, built for a pull request from this repository,
or approved for a fork's pull request by a maintainer's comment ``/gpu-approve <full SHA>``
while that SHA is still the pull request's head. Everything is checked before any code is
checked out. A fork's commit waiting for approval gets a pending ``gpu verification`` status,
so the merge gate shows what it waits for.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

STATUS_CONTEXT = "gpu verification"
APPROVE = re.compile(r"/gpu-approve\s+([0-9a-f]{40})")
SHA = re.compile(r"[0-9a-f]{40}")
WRITERS = {"admin", "maintain", "write"}


@dataclass(frozen=True)
class Decision:
    run: bool
    sha: str = ""
    reason: str = ""
    pending: bool = False  # mark the SHA pending: a fork's commit waits for approval


def _from_verify_run(event: Mapping[str, Any], repo: str) -> Decision:
    run = event["workflow_run"]
    sha, kind = run["head_sha"], run["event"]
    default = event["repository"]["default_branch"]
    if kind == "push" and run["head_branch"] == default:
        return Decision(True, sha, f"pushed to {default}")
    if kind in ("workflow_dispatch", "merge_group"):
        return Decision(True, sha, f"{kind}: started by someone with write access")
    if kind == "pull_request":
        if (run.get("head_repository") or {}).get("full_name") == repo:
            return Decision(True, sha, "pull request from this repository")
        return Decision(False, sha, f"fork: waiting for /gpu-approve {sha}", pending=True)
    return Decision(False, sha, f"verify ran for {kind}: nothing to benchmark")


def _from_comment(
    event: Mapping[str, Any],
    permission_of: Callable[[str], str],
    pull_of: Callable[[int], Mapping[str, Any]],
) -> Decision:
    issue, comment = event["issue"], event["comment"]
    if "pull_request" not in issue:
        return Decision(False, reason="a comment on an issue, not a pull request")
    match = APPROVE.fullmatch(comment["body"].strip())
    if match is None:
        return Decision(False, reason="not an approval comment")
    sha, user = match.group(1), comment["user"]["login"]
    if permission_of(user) not in WRITERS:
        return Decision(False, sha, f"{user} has no write access to approve GPU runs")
    pull = pull_of(issue["number"])
    if pull["state"] != "open":
        return Decision(False, sha, "the pull request is not open")
    if pull["head"]["sha"] != sha:
        return Decision(False, sha, f"the head moved to {pull['head']['sha']}: approve it again")
    return Decision(True, sha, f"approved by {user}")


def _from_dispatch(event: Mapping[str, Any], permission_of: Callable[[str], str]) -> Decision:
    sha = str((event.get("inputs") or {}).get("sha", "")).strip()
    if SHA.fullmatch(sha) is None:
        return Decision(False, reason=f"input sha {sha!r} is not a full 40-character SHA")
    user = event["sender"]["login"]
    if permission_of(user) not in WRITERS:
        return Decision(False, sha, f"{user} has no write access")
    return Decision(True, sha, f"dispatched by {user}")


def decide(
    event_name: str,
    event: Mapping[str, Any],
    repo: str,
    permission_of: Callable[[str], str],
    pull_of: Callable[[int], Mapping[str, Any]],
) -> Decision:
    """Whether gpu.yml's benchmark runs for this event, and on which commit."""
    if event_name == "workflow_run":
        return _from_verify_run(event, repo)
    if event_name == "issue_comment":
        return _from_comment(event, permission_of, pull_of)
    if event_name == "workflow_dispatch":
        return _from_dispatch(event, permission_of)
    return Decision(False, reason=f"{event_name} never runs the GPU benchmark")


def _api(method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        f"{os.environ.get('GITHUB_API_URL', 'https://api.github.com')}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={
            "Authorization": f"Bearer {os.environ['GH_TOKEN']}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def main() -> int:
    repo = os.environ["GITHUB_REPOSITORY"]
    with open(os.environ["GITHUB_EVENT_PATH"], encoding="utf-8") as f:
        event = json.load(f)
    decision = decide(
        os.environ["GITHUB_EVENT_NAME"],
        event,
        repo,
        lambda user: _api("GET", f"/repos/{repo}/collaborators/{user}/permission")["permission"],
        lambda number: _api("GET", f"/repos/{repo}/pulls/{number}"),
    )
    print(f"run={decision.run} sha={decision.sha or '-'}: {decision.reason}")
    if decision.pending or decision.run:
        _api(
            "POST",
            f"/repos/{repo}/statuses/{decision.sha}",
            {
                "state": "pending",
                "context": STATUS_CONTEXT,
                "description": (decision.reason if decision.pending else "benchmark running")[:140],
            },
        )
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
        out.write(f"run={'true' if decision.run else 'false'}\nsha={decision.sha}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
