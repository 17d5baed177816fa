"""Every refusal in gpu_gate.py's chain, each alone: an attacker that passes every other check of
an admitted event (a maintainer's pull request, an approval, a dispatch, a push, a queue entry)
and fails just that one is refused, so removing any one check fails a test here."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from .ci_tools import FORK, REPO, tool

gpu_gate = tool("gpu_gate")

HEAD, OTHER = "a" * 40, "b" * 40
OWN = f"{REPO}/.github/workflows/gpu.yml@refs/heads/main"
WRITERS = {"maintainer", "reviewer"}


@dataclass
class Case:
    """One event, and what the API answers about it."""

    event_name: str
    payload: dict[str, Any]
    ctx: Any = field(default_factory=lambda: gpu_gate.Context(REPO, "main", OWN,
                                                              "refs/heads/main", HEAD))  # fmt: skip
    pull: dict[str, Any] = field(default_factory=lambda: {
        "state": "open", "head": {"sha": HEAD}, "user": {"login": "maintainer"}})  # fmt: skip
    passed: set[str] = field(default_factory=lambda: {HEAD})
    writers: set[str] = field(default_factory=lambda: set(WRITERS))

    def decide(self) -> Any:
        return gpu_gate.decide(
            self.event_name, self.payload, self.ctx,
            lambda user: "write" if user in self.writers else "read",
            lambda number: self.pull, lambda sha: sha in self.passed,
        )  # fmt: skip


def _run(**changes: Any) -> dict[str, Any]:
    run = {
        "path": ".github/workflows/verify.yml", "event": "pull_request", "head_sha": HEAD,
        "head_branch": "feature", "head_repository": {"full_name": REPO},
        "actor": {"login": "maintainer"}, "triggering_actor": {"login": "maintainer"},
        "pull_requests": [{"number": 7, "base": {"ref": "main"}}],
    }  # fmt: skip
    return {"workflow_run": {**run, **changes}}


ADMITTED: dict[str, Callable[[], Case]] = {
    "pull request": lambda: Case("workflow_run", _run()),
    "approval": lambda: Case("issue_comment", {
        "issue": {"number": 7, "pull_request": {}},
        "comment": {"body": f"/gpu-approve {HEAD}", "user": {"login": "reviewer"}}}),
    "dispatch": lambda: Case("workflow_dispatch", {"inputs": {"sha": HEAD},
                                                   "sender": {"login": "maintainer"}}),
    "push": lambda: Case("push", {}),
    "queue": lambda: Case("workflow_run", _run(
        event="merge_group", head_sha=OTHER, pull_requests=[],
        head_branch=f"gh-readonly-queue/main/pr-7-{HEAD}")),
}  # fmt: skip


def _set(path: str, value: Any) -> Callable[[Case], None]:
    """Set the payload's ``a.b.c`` to ``value``."""

    def change(case: Case) -> None:
        *parents, last = path.split(".")
        target = case.payload
        for key in parents:
            target = target[key]
        target[last] = value

    return change


def _ctx(**changes: str) -> Callable[[Case], None]:
    def change(case: Case) -> None:
        case.ctx = replace(case.ctx, **changes)

    return change


def _pull(**changes: Any) -> Callable[[Case], None]:
    return lambda case: case.pull.update(changes)


ATTACKS: dict[str, tuple[str, Callable[[Case], None]]] = {
    "a copy of gpu.yml on a branch": ("approval", _ctx(
        workflow_ref=f"{REPO}/.github/workflows/gpu.yml@refs/heads/feature")),
    "another file": ("pull request", _ctx(
        workflow_ref=f"{REPO}/.github/workflows/copy.yml@refs/heads/main")),
    "a push to a branch": ("push", _ctx(ref="refs/heads/feature")),
    "a dispatch from a branch": ("dispatch", _ctx(ref="refs/heads/feature")),
    "a run of another file named verify": ("pull request", _set(
        "workflow_run.path", ".github/workflows/evil.yml")),
    "a verify run for another event": ("pull request", _set("workflow_run.event", "push")),
    "a fork's pull request": ("pull request", _set("workflow_run.head_repository",
                                                   {"full_name": FORK})),
    "a Dependabot branch": ("pull request", _set("workflow_run.head_branch", "dependabot/pip/x")),
    "pushed by an outsider": ("pull request", _set("workflow_run.actor", {"login": "outsider"})),
    "re-run by a bot": ("pull request", _set("workflow_run.triggering_actor",
                                             {"login": "writer[bot]"})),
    "a pull request into another branch": ("pull request", _set(
        "workflow_run.pull_requests", [{"number": 7, "base": {"ref": "release"}}])),
    "a pull request by an outsider": ("pull request", _pull(user={"login": "outsider"})),
    "a run that lists no pull request": ("pull request", _set("workflow_run.pull_requests", [])),
    "an approval on an issue": ("approval", _set("issue", {"number": 7})),
    "an approval inside other text": ("approval", _set("comment.body", f"ok /gpu-approve {HEAD}")),
    "an approval by an outsider": ("approval", _set("comment.user", {"login": "outsider"})),
    "an approval of a closed pull request": ("approval", _pull(state="closed")),
    "an approval of an old head": ("approval", _pull(head={"sha": OTHER})),
    "a dispatch of a short SHA": ("dispatch", _set("inputs", {"sha": HEAD[:7]})),
    "a dispatch by an outsider": ("dispatch", _set("sender", {"login": "outsider"})),
    "a queue entry of a head that never passed": ("queue", lambda case: case.passed.clear()),
    "a queue entry whose pull request moved on": ("queue", _pull(head={"sha": OTHER})),
    "a queue entry into another branch": ("queue", _set(
        "workflow_run.head_branch", f"gh-readonly-queue/release/pr-7-{HEAD}")),
    "a merge-group run of another branch": ("queue", _set("workflow_run.head_branch", "main")),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ADMITTED))
def test_each_admitted_event_runs(name: str) -> None:
    decision = ADMITTED[name]().decide()
    assert decision.run, decision.reason


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_check_alone_refuses_its_attacker(attack: str) -> None:
    base, plant = ATTACKS[attack]
    case = copy.deepcopy(ADMITTED[base]())
    plant(case)
    decision = case.decide()
    assert not decision.run, f"{attack}: {decision.reason}"
    assert decision.reason


def test_a_head_passed_only_by_the_apps_newest_status() -> None:
    from .ci_tools import FakeApi

    path = f"/repos/{REPO}/commits/{HEAD}/statuses"
    app = "amptrain-gate[bot]"

    def passed(*statuses: tuple[str, str]) -> bool:
        answer = [{"context": "gpu verification", "state": state, "creator": {"login": who}}
                  for who, state in statuses]  # fmt: skip
        return gpu_gate.gpu_passed(FakeApi({path: answer}), REPO, HEAD, app)

    assert passed((app, "success"))
    assert not passed(("github-actions[bot]", "success"))  # a workflow token's, not the App's
    assert not passed((app, "failure"), (app, "success"))  # newest first: it failed since
    assert not passed()


def test_a_pull_request_into_another_branch_leaves_the_gpu_check_alone() -> None:
    case = ADMITTED["pull request"]()
    case.payload["workflow_run"]["pull_requests"] = [{"number": 9, "base": {"ref": "release"}}]
    decision = case.decide()
    assert not decision.run and not decision.pending  # nothing marked on the shared head
