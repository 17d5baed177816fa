"""The path where nothing fires: an open pull request whose head commit never got a judged
"verification report" or "gpu verification" (verify.yml was broken, renamed or never
triggered, a judge's run was lost). Run on a schedule by judge.yml from the default branch, it
sets those checks to failure, saying why, so the pull request shows what is wrong instead of
waiting. A judge that runs later replaces the status with its verdict. Only statuses the gate
App set count as reported (GATE_APP_SLUG names it): one of the same name set with another token
is what the branch ruleset ignores, so the sweep ignores it too.

    python tools/ci/status_sweep.py        # in sweep.yml, on schedule
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from github_api import Api, RestApi, run_url, shown
from verdict_status import CONTEXTS, GATE_TOKEN, GPU, REPORT, RUNNING, Status, post

GRACE = timedelta(minutes=30)  # a pull request younger than this may still be starting its run
PENDING_LIMIT = timedelta(hours=24)  # GitHub ends a queued job after a day


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def latest_by(statuses: Iterable[Mapping[str, Any]], author: str) -> dict[str, Mapping[str, Any]]:
    """The newest status of each gate check that ``author`` set; the API lists a commit's
    statuses newest first."""
    latest: dict[str, Mapping[str, Any]] = {}
    for status in statuses:
        by = (status.get("creator") or {}).get("login")
        if status.get("context") in CONTEXTS and by == author:
            latest.setdefault(status["context"], status)
    return latest


def stale(
    statuses: Iterable[Mapping[str, Any]], opened: datetime, now: datetime, author: str
) -> dict[str, Status]:
    """The gate's checks to fail on a head commit, given its statuses (newest first) and the
    login of the App that alone sets them."""
    if now - opened < GRACE:
        return {}
    latest = latest_by(statuses, author)
    found = {}
    for context in CONTEXTS:
        status = latest.get(context)
        if status is None:
            why = "never judged: no verify.yml run reported on this commit; push again"
            if context == GPU:
                why = "never judged: no GPU run was started or refused for this commit"
            found[context] = Status("failure", why)
        elif (  # a fork's GPU check stays pending until a maintainer approves: that is no loss
            (context == REPORT or status.get("description") == RUNNING)
            and status["state"] == "pending"
            and now - _time(status["updated_at"]) > PENDING_LIMIT
        ):
            found[context] = Status("failure", "still pending after 24 h: the run was lost")
    return found


def sweep(api: Api, gate: Api, repo: str, now: datetime, url: str, author: str) -> int:
    """Fail every stale check of every open pull request (read with ``api``, set with the
    App's ``gate``); how many were set."""
    count = 0
    for pull in api.pages(f"/repos/{repo}/pulls", state="open"):
        sha = pull["head"]["sha"]
        statuses = api.get(f"/repos/{repo}/commits/{sha}/statuses", per_page=100)
        for context, status in stale(statuses, _time(pull["created_at"]), now, author).items():
            post(gate, repo, sha, context, status, url)
            print(f"#{pull['number']} {sha[:12]} {context}: {shown(status.description)}")
            count += 1
    return count


def main() -> int:
    """Sweep the repository's open pull requests."""
    env = os.environ
    author = f"{env['GATE_APP_SLUG']}[bot]"
    api, gate = RestApi(), RestApi(token_var=GATE_TOKEN)
    count = sweep(api, gate, env["GITHUB_REPOSITORY"], datetime.now(UTC), run_url(), author)
    print(f"{count} stale check(s) set to failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
