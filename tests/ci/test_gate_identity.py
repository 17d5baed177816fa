"""The required checks come from one identity: the gate App, whose key lives in the ``gate``
environment (deployment branch: the default branch alone), and whose checks the branch ruleset
requires by the App's ID. The workflows are held to that here, and every repository setting the
gate relies on is read back from recorded API answers, each missing one found alone."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from .ci_tools import REPO, ROOT, FakeApi, load_workflow, tool

repo_settings = tool("repo_settings")
verdict_status = tool("verdict_status")
judge_records = tool("judge_records")

DOCS = {name: load_workflow(name) for name in ("judge.yml", "gpu.yml", "sweep.yml", "image.yml")}
APP_ID = 912345
TOKEN_ACTION = re.compile(r"actions/create-github-app-token@[0-9a-f]{40}")
POSTS = re.compile(r"tools/ci/(verdict_status\.py (final|pending|set)|status_sweep\.py)")
APP_INPUTS = {
    "client-id": "${{ vars.GATE_APP_CLIENT_ID }}",
    "private-key": "${{ secrets.GATE_APP_PRIVATE_KEY }}",
    "permission-statuses": "write",
}


def jobs() -> list[tuple[str, str, Mapping[str, Any]]]:
    return [(w, n, job) for w, doc in DOCS.items() for n, job in doc["jobs"].items()]


def _mint_step(job: Mapping[str, Any]) -> Mapping[str, Any]:
    (mint,) = [s for s in job["steps"] if TOKEN_ACTION.fullmatch(s.get("uses", ""))]
    return mint


def test_every_step_that_sets_a_required_check_uses_the_gate_apps_token() -> None:
    posting = [(w, n, s, job) for w, n, job in jobs() for s in job["steps"]
               if POSTS.search(s.get("run", ""))]  # fmt: skip
    assert len(posting) == 6  # judge: pending, final; gpu: pending, final, error; the sweep
    for workflow, name, step, job in posting:
        assert job.get("environment") == repo_settings.GATE_ENVIRONMENT, (workflow, name)
        mint = _mint_step(job)
        assert mint["with"] == APP_INPUTS, (workflow, name)  # statuses only, nothing else
        assert step["env"]["GATE_TOKEN"] == f"${{{{ steps.{mint['id']}.outputs.token }}}}"
        assert "GH_TOKEN" not in step["env"] or step["env"]["GH_TOKEN"] == "${{ github.token }}"


def test_the_apps_key_is_used_only_where_no_change_can_run() -> None:
    # The key's job runs the default branch's scripts only: no commit as data, and what it
    # downloads (the GPU runner's artifacts, passed on) no script of it reads.
    for workflow, name, job in jobs():
        text = json.dumps(job)
        if "secrets." not in text:
            continue
        assert text.count("secrets.") == 1 and "secrets.GATE_APP_PRIVATE_KEY" in text
        assert job.get("environment") == repo_settings.GATE_ENVIRONMENT, (workflow, name)
        scripts = json.dumps([[s.get("run"), s.get("env")] for s in job["steps"] if "run" in s])
        for step in job["steps"]:
            if "download-artifact@" in step.get("uses", ""):
                assert step["with"]["path"].split("}}")[-1] not in scripts, (workflow, name)
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                ref = step["with"].get("ref")
                assert ref in (None, "${{ github.event.repository.default_branch }}")
                assert "path" not in step["with"], (workflow, name)
        untrusted = {"pull_request", "pull_request_target", "merge_group"}
        assert not untrusted & set(DOCS[workflow]["on"]), workflow


def test_the_ruleset_requires_every_check_the_scripts_post_from_the_app() -> None:
    rules = repo_settings.branch_ruleset(APP_ID)["rules"]
    (checks,) = [r["parameters"] for r in rules if r["type"] == "required_status_checks"]
    assert {(c["context"], c["integration_id"]) for c in checks["required_status_checks"]} == {
        (context, APP_ID) for context in verdict_status.CONTEXTS
    }
    assert checks["strict_required_status_checks_policy"] is True


def test_the_docs_list_every_setting_with_the_attack_it_stops() -> None:
    docs = " ".join((ROOT / "docs" / "ci.md").read_text().split())
    section = docs.split("## Settings a maintainer must turn on", 1)[1].split("\n## ", 1)[0]
    for setting in repo_settings.SETTINGS:
        assert setting.title in section, setting.title
        assert setting.stops in section, setting.stops


def test_the_rulesets_are_written_to_import(tmp_path: Path) -> None:
    assert repo_settings.main(["rulesets", "--app-id", str(APP_ID), "--out", str(tmp_path)]) == 0
    branch = json.loads((tmp_path / "branch-ruleset.json").read_text())
    assert branch == repo_settings.branch_ruleset(APP_ID)
    tag = json.loads((tmp_path / "tag-ruleset.json").read_text())
    assert repo_settings.tag_problem(tag) is None


# ---- the live settings, read back from recorded answers --------------------------------------


def answers() -> dict[str, Any]:
    """What GitHub answers an admin when every setting is in place."""
    branch = {"id": 1, "source": REPO, **repo_settings.branch_ruleset(APP_ID)}
    tag = {"id": 2, "source": REPO, **repo_settings.tag_ruleset()}

    def environment() -> dict[str, Any]:
        return {"deployment_branch_policy": {"protected_branches": False,
                                             "custom_branch_policies": True}}  # fmt: skip

    def policies() -> dict[str, Any]:
        return {"total_count": 1, "branch_policies": [{"id": 7, "name": "main", "type": "branch"}]}

    base = f"/repos/{REPO}"
    return {
        f"{base}/rulesets": [{k: r[k] for k in ("id", "name", "target", "enforcement")}
                             for r in (branch, tag)],
        f"{base}/rulesets/1": branch, f"{base}/rulesets/2": tag,
        **{f"{base}/environments/{e}": environment() for e in ("gate", "ci-image")},
        **{f"{base}/environments/{e}/deployment-branch-policies": policies()
           for e in ("gate", "ci-image")},
        f"{base}/actions/permissions/workflow": {
            "default_workflow_permissions": "read", "can_approve_pull_request_reviews": False},
        f"{base}/actions/permissions/fork-pr-contributor-approval": {
            "approval_policy": "all_external_contributors"},
    }  # fmt: skip


def _rule(ruleset: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(r for r in ruleset["rules"] if r["type"] == kind)


def _edit(path: str, change: Callable[[Any], None]) -> Callable[[dict[str, Any]], None]:
    return lambda a: change(a[f"/repos/{REPO}{path}"])


def _checks(branch: dict[str, Any]) -> list[dict[str, Any]]:
    return _rule(branch, "required_status_checks")["parameters"]["required_status_checks"]


HOLES: dict[str, Callable[[dict[str, Any]], None]] = {
    "app-pin": _edit("/rulesets/1", lambda b: _checks(b)[1].update(integration_id=15368)),
    "up-to-date": _edit("/rulesets/1", lambda b: _rule(b, "required_status_checks")[
        "parameters"].update(strict_required_status_checks_policy=False)),
    "reviews": _edit("/rulesets/1", lambda b: _rule(b, "pull_request")["parameters"].update(
        required_approving_review_count=0)),
    "history": _edit("/rulesets/1", lambda b: b["rules"].remove(_rule(b, "non_fast_forward"))),
    "no-bypass": _edit("/rulesets/1", lambda b: b["bypass_actors"].append(
        {"actor_id": 5, "actor_type": "RepositoryRole", "bypass_mode": "always"})),
    "tag-names": _edit("/rulesets/2", lambda t: t["conditions"]["ref_name"].update(
        include=["refs/tags/v*"], exclude=[])),
    "gate-environment": _edit("/environments/gate/deployment-branch-policies",
                              lambda p: p["branch_policies"][0].update(type="tag")),
    "image-environment": _edit("/environments/ci-image", lambda e: e.update(
        deployment_branch_policy=None)),
    "workflow-token": _edit("/actions/permissions/workflow", lambda w: w.update(
        default_workflow_permissions="write")),
    "fork-approval": _edit("/actions/permissions/fork-pr-contributor-approval", lambda f: f.update(
        approval_policy="first_time_contributors")),
}  # fmt: skip


def test_every_setting_in_place_has_no_problem() -> None:
    assert repo_settings.check(FakeApi(answers()), REPO, APP_ID) == {
        s.key: None for s in repo_settings.SETTINGS
    }
    assert set(HOLES) == {s.key for s in repo_settings.SETTINGS}


@pytest.mark.parametrize("key", sorted(HOLES))
def test_each_missing_setting_is_found_alone(key: str) -> None:
    recorded = copy.deepcopy(answers())
    HOLES[key](recorded)
    problems = repo_settings.check(FakeApi(recorded), REPO, APP_ID)
    assert [k for k, problem in problems.items() if problem] == [key], problems


@pytest.mark.parametrize(
    ("name", "restricted"),
    [("main", True), ("refs/heads/main", True), ("heads/main", True), ("v1.2.0", False)],
)
def test_the_tag_ruleset_refuses_branch_like_names_and_keeps_versions(
    name: str, restricted: bool
) -> None:
    names = repo_settings.tag_ruleset()["conditions"]["ref_name"]
    ref = f"refs/tags/{name}"
    covered = repo_settings._refs_match(ref, names["include"])
    assert (covered and not repo_settings._refs_match(ref, names["exclude"])) == restricted


def test_the_judge_fails_while_the_default_branch_can_be_merged_around_the_app() -> None:
    # GET /repos/R/rules/branches/main: the active rules, readable with a read-only token
    path = f"/repos/{REPO}/rules/branches/main"
    rules = [{**r, "ruleset_id": 1} for r in repo_settings.branch_ruleset(APP_ID)["rules"]]
    problem = judge_records.settings_problem
    assert problem(FakeApi({path: rules}), REPO, "main", str(APP_ID)) is None
    unpinned = copy.deepcopy(rules)
    _checks({"rules": unpinned})[0].pop("integration_id")
    assert "verification report" in problem(FakeApi({path: unpinned}), REPO, "main", str(APP_ID))
    assert "GATE_APP_ID" in problem(FakeApi({path: rules}), REPO, "main", "")


def test_the_judge_checks_the_default_branchs_rules_every_run() -> None:
    (step,) = [s for s in DOCS["judge.yml"]["jobs"]["judge"]["steps"]
               if "judge_records.py" in s.get("run", "")]  # fmt: skip
    assert "--settings" in step["run"] and step["env"]["GATE_APP_ID"] == "${{ vars.GATE_APP_ID }}"
