"""What change a finished verify run tested, read from the API, never from the run's artifacts:
whether the run is the repository's verify.yml at all, its pull request, and every file the
change touches, written one a line for ``stagegate report --changed-files``.

    python tools/ci/pr_change.py --out changed-files.txt     # in judge.yml, on workflow_run

writes ``judge=true|false``, ``why=``, ``sha=``, ``pr=`` (empty when none), ``commit=`` (what the
stages run: a pull request's merge commit, else the run's commit), ``base=`` and ``problem=``
(why the change cannot be judged, which fails the check) to $GITHUB_OUTPUT. A pull request is
judged only into the default branch (one into another branch with the same head is left alone,
so it cannot reset the checks), and only as GitHub's merge commit whose parents the API shows
are a commit of the default branch and the head the run tested. ``--head SHA`` describes
one commit instead (gpu.yml), ``--push`` comparing it with its parent.
A pull request, merge-queue entry or manual run is compared with the default branch, a push
with its first parent, three dots (the change since they parted). The compare API lists at most
300 files: a change that reaches that many is refused, since a gate file could be among those
left out.

    python tools/ci/pr_change.py --out F --head SHA [--push]   # in gpu.yml
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from github_api import Api, RestApi, read_event, shown, write_outputs

VERIFY = ".github/workflows/verify.yml"
COMPARE_LIMIT = 300
SHA = re.compile(r"[0-9a-f]{40}")


class ChangeError(Exception):
    """The change's files cannot be listed in full."""


def is_verify(run: Mapping[str, Any], repo: str) -> str | None:
    """Why ``run`` is not this repository's verify.yml (a pull request can add a workflow of the
    same name in another file), or None."""
    if run.get("path") != VERIFY:
        return f"the run is {run.get('path')!r}, not {VERIFY}"
    if (run.get("repository") or {}).get("full_name") != repo:
        return "the run belongs to another repository"
    return None


def _into(pull: Mapping[str, Any], repo: str, branch: str) -> bool:
    base = pull.get("base") or {}
    return base.get("ref") == branch and (base.get("repo") or {}).get("full_name", repo) == repo


def pull_request(api: Api, repo: str, run: Mapping[str, Any], branch: str) -> int | None:
    """The open pull request into ``branch`` whose head is the run's commit. Runs of forks'
    pull requests list none in ``pull_requests``, so those are found by the head repository's
    owner and branch."""
    sha = run["head_sha"]
    for pull in run.get("pull_requests") or []:
        if (pull.get("head") or {}).get("sha") == sha and _into(pull, repo, branch):
            return int(pull["number"])
    owner = ((run.get("head_repository") or {}).get("owner") or {}).get("login")
    if not owner or not run.get("head_branch"):
        return None
    head = f"{owner}:{run['head_branch']}"
    for pull in api.pages(f"/repos/{repo}/pulls", state="open", head=head, base=branch):
        if pull["head"]["sha"] == sha and _into(pull, repo, branch):
            return int(pull["number"])
    return None


def merge_commit(api: Api, repo: str, number: int, head: str, branch: str) -> tuple[str, str]:
    """GitHub's merge commit of pull request ``number`` once its parents check out (the
    default branch's commit, then ``head``), and "", or "" and why not."""
    pull = api.get(f"/repos/{repo}/pulls/{number}")
    if (pull.get("head") or {}).get("sha") != head:
        return "", f"pull request #{number} moved on from {head[:12]}: its new head is judged"
    if not _into(pull, repo, branch):
        return "", f"pull request #{number} is not into {branch}"
    merge = str(pull.get("merge_commit_sha") or "")
    if not SHA.fullmatch(merge):
        return "", f"pull request #{number} has no merge commit (a conflict?): merge {branch} in"
    parents = [p.get("sha") for p in api.get(f"/repos/{repo}/commits/{merge}").get("parents", [])]
    if len(parents) != 2 or parents[1] != head:
        return "", f"merge commit {merge[:12]} has parents {parents}, not {branch}'s and {head}"
    status = api.get(f"/repos/{repo}/compare/{parents[0]}...{branch}").get("status")
    if status not in ("ahead", "identical"):
        return "", f"merge commit {merge[:12]}'s first parent is not on {branch} ({status})"
    return merge, ""


def base_of(api: Api, repo: str, run: Mapping[str, Any], default_branch: str) -> str:
    """What the run's commit is compared with: a push's first parent, else the default branch."""
    if run.get("event") == "push":
        parents = api.get(f"/repos/{repo}/commits/{run['head_sha']}")["parents"]
        return str(parents[0]["sha"]) if parents else run["head_sha"]
    return default_branch


def changed_files(api: Api, repo: str, base: str, head: str) -> list[str]:
    """Every path the change adds, edits, removes or renames (both names of a rename)."""
    files = api.get(f"/repos/{repo}/compare/{base}...{head}").get("files")
    if not isinstance(files, list):
        raise ChangeError(
            f"the compare API listed no files between {base} and {head}: run the check again"
        )
    if len(files) >= COMPARE_LIMIT:
        raise ChangeError(
            f"the change touches {COMPARE_LIMIT} files or more, which the compare API cannot "
            "list in full: split it so the gate can see every file it changes"
        )
    paths = {f["filename"] for f in files}
    paths.update(f["previous_filename"] for f in files if f.get("previous_filename"))
    return sorted(paths)


def _write(api: Api, repo: str, base: str, head: str, out: Path) -> str:
    """Write the change's files to ``out``; the problem that stops the gate seeing them all."""
    try:
        files = changed_files(api, repo, base, head)
    except ChangeError as exc:
        out.write_text("", encoding="utf-8")
        return str(exc)
    out.write_text("".join(f"{p}\n" for p in files), encoding="utf-8")
    print(f"{len(files)} file(s) changed between {base} and {head}")
    return ""


def describe(api: Api, repo: str, event: Mapping[str, Any], out: Path) -> dict[str, str]:
    """The outputs for judge.yml, the changed files written to ``out``."""
    run, branch = event["workflow_run"], event["repository"]["default_branch"]
    sha = str(run.get("head_sha", ""))
    why = is_verify(run, repo)
    outputs = {"judge": "false", "why": why or "", "sha": sha, "pr": "", "commit": "",
               "base": "", "problem": ""}  # fmt: skip
    if why:
        return outputs
    number, commit = None, sha
    if run.get("event") == "pull_request":
        number = pull_request(api, repo, run, branch)
        if number is None:  # into another branch, or closed: another run sets its checks
            return {**outputs, "why": f"no open pull request into {branch} has {sha[:12]}"}
        commit, outputs["problem"] = merge_commit(api, repo, number, sha, branch)
    base = base_of(api, repo, run, branch)
    problem = _write(api, repo, base, sha, out)
    return {**outputs, "judge": "true", "pr": str(number or ""), "commit": commit,
            "base": base, "problem": outputs["problem"] or problem}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Describe the run that triggered judge.yml, or (--head) one commit's change."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--head", help="a commit to describe instead of the triggering run")
    parser.add_argument("--push", action="store_true", help="--head was pushed: use its parent")
    args = parser.parse_args(argv)
    api, repo, event = RestApi(), os.environ["GITHUB_REPOSITORY"], read_event()
    if args.head:
        run = {"event": "push" if args.push else "", "head_sha": args.head}
        base = base_of(api, repo, run, event["repository"]["default_branch"])
        outputs = {"problem": _write(api, repo, base, args.head, args.out)}
    else:
        outputs = describe(api, repo, event, args.out)
    if outputs["problem"]:
        print(f"pr_change: {shown(outputs['problem'])}", file=sys.stderr)
    write_outputs(outputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
