"""The two required checks, "verification report" and "gpu verification": commit statuses set
only by the default branch's workflows, on the commit judged, with the gate App's installation
token (GATE_TOKEN). That token is minted in jobs of the ``gate`` environment, whose deployment
branch is the default branch alone, and the branch ruleset requires each check from that App:
a status of the same name set with any other token (a branch workflow's GITHUB_TOKEN, a
person's) does not count.

    python tools/ci/verdict_status.py final --context C --sha S   # env: UPSTREAM JUDGE STATE ...
    python tools/ci/verdict_status.py pending --context C --sha S --run-id ID
    python tools/ci/verdict_status.py set --context C --sha S --state failure --description TEXT

``final`` (UPSTREAM, JUDGE, STATE and DESCRIPTION in the environment) runs after the judge
whatever happened to it: it reports success only when the judged workflow succeeded, the judge
finished and the judge said success; every other combination (a failed, cancelled or timed-out
stage run, a judge that failed, was cancelled or was skipped, a missing or refused artifact)
reports failure or error, and the job itself then fails. GitHub counts a skipped required
check as passing, so the check is never a job that can be skipped: it is this status, which is
missing (so merging waits) until a judge sets it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from github_api import Api, RestApi, run_url, shown
from pr_change import is_verify, pull_request

REPORT, GPU = "verification report", "gpu verification"
CONTEXTS = (REPORT, GPU)
FINAL_STATES = ("success", "failure", "error")
DESCRIPTION_LIMIT = 140  # GitHub's limit for a status description
RUNNING = "benchmark running"  # the GPU check while an admitted benchmark runs
GATE_TOKEN = "GATE_TOKEN"  # the gate App's installation token: the only one that posts


@dataclass(frozen=True)
class Status:
    """A commit status: its state and the one line shown beside it."""

    state: str
    description: str

    @property
    def passed(self) -> bool:
        """Whether the check lets a merge through."""
        return self.state == "success"


def from_stagegate(exit_code: int) -> Status:
    """stagegate report's exit code as a status: 0 PASS, 1 BLOCK, anything else no verdict."""
    if exit_code == 0:
        return Status("success", "PASS: every stage met the default branch's policy")
    if exit_code == 1:
        return Status("failure", "BLOCK: see the reports")
    return Status("error", f"the records could not be judged (stagegate exit {exit_code})")


def final(upstream: str, judge_result: str, state: str, description: str) -> Status:
    """What the required check reports once the judge job is over, whatever its result.

    ``upstream`` is the judged workflow run's conclusion, ``judge_result`` the judge job's
    result (success, failure, cancelled, skipped), ``state`` and ``description`` its outputs.
    """
    if judge_result != "success":
        return Status("error", f"the judge did not finish ({judge_result or 'no result'})")
    if state not in FINAL_STATES:
        return Status("error", "the judge gave no verdict")
    if state == "success" and upstream != "success":
        return Status("failure", f"the stage run ended {upstream or 'without a conclusion'}")
    return Status(state, description or state)


def pending_refusal(
    run: Mapping[str, Any], repo: str, api: Api | None = None, branch: str = "main"
) -> str | None:
    """Why a requested run must not mark its commit pending: it is not verify.yml (any file
    may take that name), it already finished and its judge may have set the verdict, or (with
    ``api``) it is a pull request's that is not into ``branch``, whose run sets no check."""
    why = is_verify(run, repo)
    if why:
        return why
    if run.get("status") == "completed":
        return f"run {run.get('id')} already finished: its judge sets the status"
    if api and run.get("event") == "pull_request" and pull_request(api, repo, run, branch) is None:
        return f"no open pull request into {branch} has {run.get('head_sha')}"
    return None


def post(api: Api, repo: str, sha: str, context: str, status: Status, url: str) -> None:
    """Set ``context`` on commit ``sha``."""
    if context not in CONTEXTS:
        raise ValueError(f"{context!r} is not one of the gate's checks")
    api.post(
        f"/repos/{repo}/statuses/{sha}",
        {
            "state": status.state,
            "context": context,
            "description": status.description[:DESCRIPTION_LIMIT],
            "target_url": url,
        },
    )


def main(argv: list[str] | None = None) -> int:
    """Post a status; ``final`` exits 1 unless it posted success."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["final", "pending", "set"])
    parser.add_argument("--context", required=True, choices=CONTEXTS)
    parser.add_argument("--sha", required=True)
    parser.add_argument("--run-id", help="pending: the judged run, checked still going")
    parser.add_argument("--state", choices=[*FINAL_STATES, "pending"])
    parser.add_argument("--description", default="")
    args = parser.parse_args(argv)
    env = os.environ
    repo = env["GITHUB_REPOSITORY"]
    if args.command == "pending":
        api = RestApi()
        run = api.get(f"/repos/{repo}/actions/runs/{args.run_id}")
        why = pending_refusal(run, repo, api, env.get("DEFAULT_BRANCH", "main"))
        if why:
            print(f"no pending status: {shown(why)}")
            return 0
        status = Status("pending", args.description or "the stages are running")
    elif args.command == "set":
        status = Status(args.state or "error", args.description)
    else:
        status = final(
            env.get("UPSTREAM", ""), env.get("JUDGE", ""),
            env.get("STATE", ""), env.get("DESCRIPTION", ""),
        )  # fmt: skip
    post(RestApi(token_var=GATE_TOKEN), repo, args.sha, args.context, status, run_url(env))
    print(f"{args.context}: {status.state}: {shown(status.description)}")
    return 0 if args.command != "final" or status.passed else 1


if __name__ == "__main__":
    sys.exit(main())
