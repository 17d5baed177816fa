"""Which commit the judged stages run, read from the API by tools/ci/pr_change.py: a pull
request into the default branch, as GitHub's merge commit whose parents are a commit of the
default branch and the head the verify run tested. Each check refuses alone, with the other
answers genuine; a pull request into another branch with the same head is not judged at all,
so it cannot reset the checks of the one into main."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .ci_tools import REPO, FakeApi, tool

pr_change = tool("pr_change")

HEAD, MERGE, MAIN_TIP, OTHER = "a" * 40, "e" * 40, "f" * 40, "b" * 40
INTO_MAIN = {"ref": "main", "sha": MAIN_TIP, "repo": {"full_name": REPO}}


def answers() -> dict[str, Any]:
    return {
        f"/repos/{REPO}/pulls/7": {
            "number": 7,
            "head": {"sha": HEAD},
            "base": INTO_MAIN,
            "merge_commit_sha": MERGE,
        },
        f"/repos/{REPO}/commits/{MERGE}": {"parents": [{"sha": MAIN_TIP}, {"sha": HEAD}]},
        f"/repos/{REPO}/compare/{MAIN_TIP}...main": {"status": "identical"},
        f"/repos/{REPO}/compare/main...{HEAD}": {"files": [{"filename": "src/amptrain/loop.py"}]},
    }


def merge(recorded: dict[str, Any]) -> tuple[str, str]:
    return pr_change.merge_commit(FakeApi(recorded), REPO, 7, HEAD, "main")


def test_the_merge_commit_of_main_and_the_head_is_run() -> None:
    assert merge(answers()) == (MERGE, "")


def _edit(path: str, change: Callable[[Any], None]) -> dict[str, Any]:
    recorded = copy.deepcopy(answers())
    change(recorded[f"/repos/{REPO}{path}"])
    return recorded


ATTACKS = {
    "the head moved after the run": _edit("/pulls/7", lambda p: p["head"].update(sha=OTHER)),
    "into another branch": _edit("/pulls/7", lambda p: p.update(base={**INTO_MAIN, "ref": "x"})),
    "no merge commit": _edit("/pulls/7", lambda p: p.update(merge_commit_sha=None)),
    "a merge of another head": _edit(f"/commits/{MERGE}", lambda c: c["parents"][1].update(
        sha=OTHER)),
    "one parent only": _edit(f"/commits/{MERGE}", lambda c: c["parents"].pop(0)),
    "a first parent not on main": _edit(f"/compare/{MAIN_TIP}...main", lambda c: c.update(
        status="diverged")),
}  # fmt: skip


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_check_of_the_merge_commit_alone_refuses(attack: str) -> None:
    commit, problem = merge(ATTACKS[attack])
    assert commit == "" and problem


def _event(pulls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "workflow_run": {
            "path": ".github/workflows/verify.yml", "repository": {"full_name": REPO},
            "head_sha": HEAD, "event": "pull_request", "head_branch": "feature",
            "head_repository": {"owner": {"login": "owner"}}, "pull_requests": pulls,
        },
        "repository": {"default_branch": "main"},
    }  # fmt: skip


def test_a_pull_request_is_judged_as_its_merge_commit(tmp_path: Path) -> None:
    pull = {"number": 7, "head": {"sha": HEAD}, "base": INTO_MAIN}
    out = pr_change.describe(FakeApi(answers()), REPO, _event([pull]), tmp_path / "f.txt")
    assert (out["judge"], out["pr"], out["commit"], out["problem"]) == ("true", "7", MERGE, "")


def test_a_pull_request_into_another_branch_leaves_the_checks_alone(tmp_path: Path) -> None:
    # the same head, opened into another branch: no status is set from its run
    pull = {"number": 9, "head": {"sha": HEAD}, "base": {**INTO_MAIN, "ref": "release"}}
    recorded = {**answers(), f"/repos/{REPO}/pulls": []}
    out = pr_change.describe(FakeApi(recorded), REPO, _event([pull]), tmp_path / "f.txt")
    assert out["judge"] == "false" and "into main" in out["why"]


def test_a_merge_commit_that_does_not_check_out_fails_the_check(tmp_path: Path) -> None:
    pull = {"number": 7, "head": {"sha": HEAD}, "base": INTO_MAIN}
    api = FakeApi(ATTACKS["a merge of another head"])
    out = pr_change.describe(api, REPO, _event([pull]), tmp_path / "f.txt")
    assert (out["judge"], out["commit"]) == ("true", "") and "parents" in out["problem"]


def test_a_push_runs_its_own_commit(tmp_path: Path) -> None:
    event = _event([])
    event["workflow_run"]["event"] = "push"
    recorded = {f"/repos/{REPO}/commits/{HEAD}": {"parents": [{"sha": MAIN_TIP}]},
                f"/repos/{REPO}/compare/{MAIN_TIP}...{HEAD}": {"files": []}}  # fmt: skip
    out = pr_change.describe(FakeApi(recorded), REPO, event, tmp_path / "f.txt")
    assert (out["judge"], out["commit"], out["pr"]) == ("true", HEAD, "")


def test_a_run_into_another_branch_marks_nothing_pending() -> None:
    verdict_status = tool("verdict_status")
    run = {**_event([{"number": 9, "head": {"sha": HEAD}, "base": {**INTO_MAIN, "ref": "x"}}])[
        "workflow_run"], "id": 3, "status": "in_progress"}  # fmt: skip
    api = FakeApi({f"/repos/{REPO}/pulls": []})
    assert "into main" in verdict_status.pending_refusal(run, REPO, api, "main")
    into_main = {**run, "pull_requests": [{"number": 7, "head": {"sha": HEAD}, "base": INTO_MAIN}]}
    assert verdict_status.pending_refusal(into_main, REPO, api, "main") is None


def test_a_run_of_another_repositorys_verify_is_not_judged() -> None:
    run = {"path": ".github/workflows/verify.yml", "repository": {"full_name": "someone/x"}}
    assert "another repository" in pr_change.is_verify(run, REPO)
