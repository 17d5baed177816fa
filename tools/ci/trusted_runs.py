"""Which workflow runs may supply what the gate trusts: the verification image's digest and the
GPU baseline. A run counts only when it is a successful run of the default branch's own
workflow file, for an event that runs that file as the default branch holds it, in this
repository; every field is checked on the run the API returns, never taken from an artifact.

    python tools/ci/trusted_runs.py --workflow gpu.yml --events push --artifact benchmark-baseline

writes ``run-id=`` (empty when no run qualifies) and ``note=`` (why runs were refused) to
$GITHUB_OUTPUT. A branch's run, a fork's run, a pull request's run, another workflow file's run
and a failed run are all refused, whatever they uploaded.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from github_api import Api, RestApi, read_event, shown, write_outputs

RUNS_READ = 30  # the newest successful runs looked at before giving up


@dataclass(frozen=True)
class Origin:
    """What a trusted run must be: ``workflow`` (a file in .github/workflows) of ``repo``, run
    on ``default_branch`` by one of ``events``."""

    repo: str
    default_branch: str
    workflow: str
    events: frozenset[str]


def _workflow_path_ok(path: Any, origin: Origin) -> bool:
    """The run's workflow file is ``origin.workflow`` on the default branch. The API gives
    ``.github/workflows/FILE``; the full ``OWNER/REPO/.github/workflows/FILE@REF`` form is
    accepted only with this repository and the default branch."""
    if not isinstance(path, str):
        return False
    wanted = f".github/workflows/{origin.workflow}"
    if path == wanted:
        return True
    refs = {origin.default_branch, f"refs/heads/{origin.default_branch}"}
    full = re.fullmatch(r"(?P<repo>[^/]+/[^/]+)/(?P<file>[^@]+)@(?P<ref>.+)", path)
    return bool(
        full and full["repo"] == origin.repo and full["file"] == wanted and full["ref"] in refs
    )


def refusal(run: Mapping[str, Any], origin: Origin) -> str | None:
    """Why ``run`` cannot supply trusted data, or None when it can."""
    name = f"run {run.get('id')}"
    checks = [
        (_workflow_path_ok(run.get("path"), origin), f"runs {run.get('path')!r}"),
        (run.get("head_branch") == origin.default_branch, f"ran on {run.get('head_branch')!r}"),
        (run.get("event") in origin.events, f"was started by {run.get('event')!r}"),
        (
            (run.get("head_repository") or {}).get("full_name") == origin.repo,
            f"ran code of {(run.get('head_repository') or {}).get('full_name')!r}",
        ),
        ((run.get("repository") or {}).get("full_name") == origin.repo, "is another repository's"),
        (
            (run.get("status"), run.get("conclusion")) == ("completed", "success"),
            f"ended {run.get('status')}/{run.get('conclusion')}",
        ),
    ]
    for ok, why in checks:
        if not ok:
            return f"{name} {why}, not {origin.workflow} on {origin.default_branch} by " + (
                " or ".join(sorted(origin.events))
            )
    return None


def off_branch(api: Api, run: Mapping[str, Any], origin: Origin) -> str | None:
    """Why the run's commit is not on the default branch, or None. A run of a pushed tag reports
    the tag's name as its branch, so a tag named like the default branch passes ``refusal``;
    only the commit's place in the default branch's history tells them apart."""
    sha = run.get("head_sha")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{40}", sha):
        return f"run {run.get('id')} names no commit ({sha!r})"
    status = api.get(f"/repos/{origin.repo}/compare/{sha}...{origin.default_branch}").get("status")
    if status not in {"ahead", "identical"}:
        branch = origin.default_branch
        return f"run {run.get('id')} ran {sha[:12]}, which is not on {branch} ({status})"
    return None


@dataclass
class Selection:
    """The newest qualifying run holding the artifact, and every refusal on the way."""

    run_id: int | None = None
    refusals: list[str] = field(default_factory=list)


def select(api: Api, origin: Origin, artifact: str) -> Selection:
    """The newest successful run of ``origin`` that still holds ``artifact``."""
    found = Selection()
    runs = api.pages(
        f"/repos/{origin.repo}/actions/workflows/{origin.workflow}/runs",
        key="workflow_runs",
        branch=origin.default_branch,
        status="success",
    )
    for count, run in enumerate(runs):
        if count == RUNS_READ:
            break
        why = refusal(run, origin) or off_branch(api, run, origin)
        if why:
            found.refusals.append(why)
            continue
        listing = api.get(f"/repos/{origin.repo}/actions/runs/{run['id']}/artifacts", name=artifact)
        if any(a.get("name") == artifact and not a.get("expired") for a in listing["artifacts"]):
            found.run_id = int(run["id"])
            return found
        found.refusals.append(f"run {run['id']} holds no {artifact} artifact (expired?)")
    return found


def default_branch(event: Mapping[str, Any], api: Api, repo: str) -> str:
    """The repository's default branch, from the event or else the API."""
    branch = (event.get("repository") or {}).get("default_branch")
    return str(branch or api.get(f"/repos/{repo}")["default_branch"])


def main(argv: list[str] | None = None) -> int:
    """Find the trusted run and write its id, or none and why, to $GITHUB_OUTPUT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflow", required=True, help="file name in .github/workflows")
    parser.add_argument("--events", required=True, help="comma-separated events, e.g. push")
    parser.add_argument("--artifact", required=True)
    args = parser.parse_args(argv)
    api, repo = RestApi(), os.environ["GITHUB_REPOSITORY"]
    origin = Origin(
        repo, default_branch(read_event(), api, repo), args.workflow,
        frozenset(args.events.split(",")),
    )  # fmt: skip
    found = select(api, origin, args.artifact)
    for line in found.refusals:
        print(f"refused: {shown(line)}")
    why = found.refusals[0] if found.refusals else f"{args.workflow} has no successful run yet"
    note = "" if found.run_id else f"no trusted {args.artifact}: {why}"
    print(f"{args.artifact}: run {found.run_id}" if found.run_id else shown(note))
    write_outputs({"run-id": str(found.run_id or ""), "note": note})
    return 0


if __name__ == "__main__":
    sys.exit(main())
