"""The repository settings the gate relies on, as data: each with where it is set and the
attack it stops. The workflows cannot protect themselves; these settings make the gate App's
statuses the only way into the default branch.

    python tools/ci/repo_settings.py rulesets --app-id ID --out DIR
        writes DIR/branch-ruleset.json and DIR/tag-ruleset.json, to import (Settings, Rules,
        Rulesets, New ruleset, Import a ruleset) or to POST to /repos/OWNER/REPO/rulesets
    GH_TOKEN=<an admin's token> python tools/ci/repo_settings.py check --repo OWNER/REPO \\
        --app-id ID
        reads every setting back from the API and names each one missing (exit 1), else exit 0

``branch_problems`` is also what the judge asks of the default branch's active rules (readable
with the job's read-only token): while the App pin, the reviews or the up-to-date rule are
missing, the "verification report" check fails instead of passing a gate that can be bypassed.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from github_api import Api, RestApi, shown
from verdict_status import CONTEXTS

DEFAULT_BRANCH = "main"
GATE_ENVIRONMENT = "gate"  # holds the App's key: the only token that sets the required checks
IMAGE_ENVIRONMENT = "ci-image"  # image.yml's publish job
RELEASE_TAGS = "refs/tags/v[0-9]*"  # the only tags that may be created: versions
BRANCH_LIKE = ("main", "master", "HEAD", "heads/main", "refs/heads/main")

Rules = list[Mapping[str, Any]]


@dataclass(frozen=True)
class Setting:
    """One setting: its title as docs/ci.md lists it, and the attack it stops."""

    key: str
    title: str
    stops: str


SETTINGS = (
    Setting("app-pin", "Require each check from the gate App",
            "a status or job of the same name set by any other token or workflow"),
    Setting("up-to-date", "Require branches to be up to date before merging",
            "a verdict on a merge with an older default branch than the one merged into"),
    Setting("reviews", "Require one approval, from a code owner, of the latest push",
            "a change to the gate merged by its own author, or changed after approval"),
    Setting("history", "Block force pushes and deletions",
            "rewriting the history that images and baselines are trusted for"),
    Setting("no-bypass", "Leave the bypass list empty",
            "an actor who merges around the checks"),
    Setting("tag-names", "Restrict tag names to versions",
            "a tag named like the default branch, whose runs claim to be the default branch's"),
    Setting("gate-environment", "Environment gate: deployment branch main only",
            "any other branch's or any tag's workflow minting the App's token"),
    Setting("image-environment", "Environment ci-image: deployment branch main only",
            "another ref's workflow publishing the verification image"),
    Setting("workflow-token", "Workflow permissions read-only, no pull request approvals",
            "a workflow that writes or approves with a token it was never given"),
    Setting("fork-approval", "Require approval for all external contributors",
            "a fork's first pull request running workflows unseen"),
)  # fmt: skip


def branch_ruleset(app_id: int) -> dict[str, Any]:
    """The default branch's ruleset, as GitHub imports and returns it."""
    checks = [{"context": c, "integration_id": app_id} for c in CONTEXTS]
    return {
        "name": "gate: default branch", "target": "branch", "enforcement": "active",
        "conditions": {"ref_name": {"include": ["~DEFAULT_BRANCH"], "exclude": []}},
        "bypass_actors": [],
        "rules": [
            {"type": "deletion"}, {"type": "non_fast_forward"},
            {"type": "pull_request", "parameters": {
                "required_approving_review_count": 1, "require_code_owner_review": True,
                "dismiss_stale_reviews_on_push": True, "require_last_push_approval": True,
                "required_review_thread_resolution": False,
            }},
            {"type": "required_status_checks", "parameters": {
                "strict_required_status_checks_policy": True, "do_not_enforce_on_create": False,
                "required_status_checks": checks,
            }},
        ],
    }  # fmt: skip


def tag_ruleset() -> dict[str, Any]:
    """The tag ruleset: only version tags may be created, moved or deleted."""
    return {
        "name": "gate: version tags only", "target": "tag", "enforcement": "active",
        "conditions": {"ref_name": {"include": ["~ALL"], "exclude": [RELEASE_TAGS]}},
        "bypass_actors": [],
        "rules": [{"type": "creation"}, {"type": "update"}, {"type": "deletion"}],
    }  # fmt: skip


def _rule(rules: Rules, kind: str) -> Mapping[str, Any] | None:
    return next((r for r in rules if r.get("type") == kind), None)


def _params(rules: Rules, kind: str) -> Mapping[str, Any]:
    return (_rule(rules, kind) or {}).get("parameters") or {}


def app_pin_problem(rules: Rules, app_id: int) -> str | None:
    """Why a required check can be set by another source than the App, or None."""
    pinned = {
        (c.get("context"), c.get("integration_id"))
        for c in _params(rules, "required_status_checks").get("required_status_checks") or []
    }
    missing = [c for c in CONTEXTS if (c, app_id) not in pinned]
    return f"not required from App {app_id}: {', '.join(missing)}" if missing else None


def up_to_date_problem(rules: Rules) -> str | None:
    """Why a branch behind the default branch may merge, or None."""
    strict = _params(rules, "required_status_checks").get("strict_required_status_checks_policy")
    return None if strict is True else "branches need not be up to date before merging"


def reviews_problem(rules: Rules) -> str | None:
    """Why a change may merge without a code owner's approval of its latest push, or None."""
    review = _params(rules, "pull_request")
    if int(review.get("required_approving_review_count") or 0) < 1:
        return "no approving review is required"
    for key in ("require_code_owner_review", "dismiss_stale_reviews_on_push",
                "require_last_push_approval"):  # fmt: skip
        if review.get(key) is not True:
            return f"{key} is off"
    return None


def history_problem(rules: Rules) -> str | None:
    """Why the default branch's history can be rewritten, or None."""
    missing = [k for k in ("non_fast_forward", "deletion") if _rule(rules, k) is None]
    return f"not blocked: {', '.join(missing)}" if missing else None


def branch_problems(rules: Rules, app_id: int) -> list[str]:
    """What the default branch's active rules leave open (the judge asks this every run)."""
    found = [
        app_pin_problem(rules, app_id), up_to_date_problem(rules), reviews_problem(rules),
        history_problem(rules),
    ]  # fmt: skip
    return [p for p in found if p]


def _refs_match(ref: str, patterns: Iterable[str]) -> bool:
    return any(p == "~ALL" or fnmatch.fnmatchcase(ref, p) for p in patterns)


def tag_problem(ruleset: Mapping[str, Any] | None) -> str | None:
    """Why a tag named like the default branch can be pushed, or None."""
    if ruleset is None or ruleset.get("enforcement") != "active":
        return "no active tag ruleset"
    names = (ruleset.get("conditions") or {}).get("ref_name") or {}
    rules = ruleset.get("rules") or []
    for name in BRANCH_LIKE:
        ref = f"refs/tags/{name}"
        covered = _refs_match(ref, names.get("include") or [])
        if not covered or _refs_match(ref, names.get("exclude") or []):
            return f"tag {name!r} is not restricted"
    return None if _rule(rules, "creation") else "tag creation is not restricted"


def environment_problem(environment: Mapping[str, Any], policies: Mapping[str, Any]) -> str | None:
    """Why a job of another ref than the default branch (a tag included) can use the
    environment, or None."""
    policy = environment.get("deployment_branch_policy") or {}
    if policy.get("custom_branch_policies") is not True:
        return "deployment branches are not limited to selected branches"
    found = [(p.get("name"), p.get("type", "branch")) for p in policies.get("branch_policies", [])]
    if found != [(DEFAULT_BRANCH, "branch")]:
        return f"deployment refs are {found}, not the branch {DEFAULT_BRANCH} alone"
    return None


def workflow_token_problem(answer: Mapping[str, Any]) -> str | None:
    """Why a workflow's default token may write or approve, or None."""
    if answer.get("default_workflow_permissions") != "read":
        return "the default workflow token can write"
    if answer.get("can_approve_pull_request_reviews") is not False:
        return "workflows may approve pull requests"
    return None


def fork_problem(answer: Mapping[str, Any]) -> str | None:
    """Why a fork's workflows may run unapproved, or None."""
    policy = answer.get("approval_policy")
    return None if policy == "all_external_contributors" else f"fork approval is {policy!r}"


def _rulesets(api: Api, repo: str) -> list[Mapping[str, Any]]:
    listed = api.get(f"/repos/{repo}/rulesets", includes_parents="true")
    return [api.get(f"/repos/{repo}/rulesets/{r['id']}") for r in listed]


def _active(rulesets: list[Mapping[str, Any]], target: str) -> list[Mapping[str, Any]]:
    return [r for r in rulesets if r.get("target") == target and r.get("enforcement") == "active"]


def _tags_problem(tags: list[Mapping[str, Any]]) -> str | None:
    """None when some active tag ruleset restricts branch-like names, else why not."""
    problems = [tag_problem(t) for t in tags] or [tag_problem(None)]
    return None if None in problems else problems[0]


def _bypass_problem(branch: list[Mapping[str, Any]]) -> str | None:
    named = [r.get("name") for r in branch if r.get("bypass_actors")]
    return f"bypass actors in {named}" if named else None


def _environment(api: Api, repo: str, name: str) -> str | None:
    env = api.get(f"/repos/{repo}/environments/{name}")
    policies = api.get(f"/repos/{repo}/environments/{name}/deployment-branch-policies")
    return environment_problem(env, policies)


def check(api: Api, repo: str, app_id: int) -> dict[str, str | None]:
    """Every setting's problem (None where it holds), read with an admin's token."""
    rulesets = _rulesets(api, repo)
    branch = _active(rulesets, "branch")
    rules = [rule for r in branch for rule in r.get("rules") or []]
    tags = _active(rulesets, "tag")
    permissions = f"/repos/{repo}/actions/permissions"
    problems: dict[str, Callable[[], str | None]] = {
        "app-pin": lambda: app_pin_problem(rules, app_id),
        "up-to-date": lambda: up_to_date_problem(rules),
        "reviews": lambda: reviews_problem(rules),
        "history": lambda: history_problem(rules),
        "no-bypass": lambda: _bypass_problem(branch),
        "tag-names": lambda: _tags_problem(tags),
        "gate-environment": lambda: _environment(api, repo, GATE_ENVIRONMENT),
        "image-environment": lambda: _environment(api, repo, IMAGE_ENVIRONMENT),
        "workflow-token": lambda: workflow_token_problem(api.get(f"{permissions}/workflow")),
        "fork-approval": lambda: fork_problem(
            api.get(f"{permissions}/fork-pr-contributor-approval")),
    }  # fmt: skip
    return {s.key: problems[s.key]() for s in SETTINGS}


def main(argv: list[str] | None = None) -> int:
    """Write the rulesets, or check the live settings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("rulesets")
    write.add_argument("--out", type=Path, required=True)
    audit = sub.add_parser("check")
    audit.add_argument("--repo", required=True)
    for command in (write, audit):
        command.add_argument("--app-id", type=int, required=True, help="the gate App's ID")
    args = parser.parse_args(argv)
    if args.command == "rulesets":
        args.out.mkdir(parents=True, exist_ok=True)
        for name, doc in (("branch", branch_ruleset(args.app_id)), ("tag", tag_ruleset())):
            (args.out / f"{name}-ruleset.json").write_text(json.dumps(doc, indent=2) + "\n")
        return 0
    problems = check(RestApi(), args.repo, args.app_id)
    for setting in SETTINGS:
        problem = problems[setting.key]
        print(
            f"MISSING  {setting.title}: {shown(problem)}"
            if problem
            else f"ok       {setting.title}"
        )
    return 1 if any(problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
