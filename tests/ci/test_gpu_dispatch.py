"""The GPU runner is reachable only through the dispatch contract (tools/ci/gpu_dispatch.py):
it lives in a repository of its own, and its one workflow refuses every dispatch but the one
main's gpu.yml sent for a commit it admitted. Each check is shown to refuse alone: an attacker
that passes every other check (a copied workflow, another ref, a replayed dispatch, a forged
admission) is refused by that one check."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from .ci_tools import REPO, ROOT, WORKFLOWS, FakeApi, load_workflow, tool

gpu_dispatch = tool("gpu_dispatch")

RUNNER_REPO = "owner/amptrain-gpu"
APP = "amptrain-gate[bot]"
SHA, BASE = "a" * 40, "b" * 40
IMAGE = "ghcr.io/owner/amptrain-verify@sha256:" + "c" * 64
RUN_URL = f"https://github.com/{REPO}/actions/runs/555"
TEMPLATE = ROOT / ".github" / "gpu-runner" / "gpu-runner.yml"

DISPATCH = gpu_dispatch.Dispatch(REPO, "555", "1", SHA, BASE, IMAGE)
RUNNER = gpu_dispatch.Runner(
    repo=RUNNER_REPO, default_branch="main",
    workflow_ref=f"{RUNNER_REPO}/.github/workflows/gpu-runner.yml@refs/heads/main",
    ref="refs/heads/main", event_name="workflow_dispatch", run_id="900", run_attempt="1",
    sender=APP, triggering_actor=APP, app_login=APP, source_repo=REPO,
)  # fmt: skip


def recorded() -> dict[str, Any]:
    """The API's answers for main's genuine dispatch, as the runner's contract job reads them."""
    return {
        f"/repos/{REPO}/actions/runs/555": {
            "id": 555, "path": ".github/workflows/gpu.yml", "repository": {"full_name": REPO},
            "event": "workflow_run", "head_branch": "main", "run_attempt": 1,
            "status": "in_progress", "html_url": RUN_URL,
        },
        f"/repos/{REPO}/commits/{SHA}/statuses": [
            {"context": "gpu verification", "state": "pending", "description": "benchmark running",
             "target_url": RUN_URL, "creator": {"login": APP}},
            {"context": "gpu verification", "state": "pending", "creator": {"login": APP},
             "description": "a fork's pull request: waiting for /gpu-approve", "target_url": "x"},
        ],
        f"/repos/{RUNNER_REPO}/actions/workflows/gpu-runner.yml/runs": {"workflow_runs": [
            {"id": 900, "display_title": DISPATCH.key()},
            {"id": 870, "display_title": f"gpu {REPO}#554.1"},
        ]},
    }  # fmt: skip


def refused(runner: Any = RUNNER, dispatch: Any = DISPATCH, answers: Any = None) -> list[str]:
    found = gpu_dispatch.refusals(runner, dispatch, FakeApi(answers or recorded()))
    return sorted(found)


def test_mains_own_dispatch_of_an_admitted_commit_passes_every_check() -> None:
    assert refused() == []


def _runner(**changes: str) -> Any:
    return dataclasses.replace(RUNNER, **changes)


def _dispatch(**changes: str) -> Any:
    return dataclasses.replace(DISPATCH, **changes)


def _answer(path: str, change: Callable[[Any], None]) -> dict[str, Any]:
    answers = copy.deepcopy(recorded())
    change(answers[path])
    return answers


SOURCE_RUN = f"/repos/{REPO}/actions/runs/555"
STATUSES = f"/repos/{REPO}/commits/{SHA}/statuses"
RUNNER_RUNS = f"/repos/{RUNNER_REPO}/actions/workflows/gpu-runner.yml/runs"
ATTACKS = {
    "a copy of gpu-runner.yml in another file": (
        "workflow", {"runner": _runner(
            workflow_ref=f"{RUNNER_REPO}/.github/workflows/copy.yml@refs/heads/main")}),
    "gpu-runner.yml dispatched on another branch": (
        "ref", {"runner": _runner(
            ref="refs/heads/feature",
            workflow_ref=f"{RUNNER_REPO}/.github/workflows/gpu-runner.yml@refs/heads/feature")}),
    "gpu-runner.yml dispatched on a tag named main": (
        "ref", {"runner": _runner(
            ref="refs/tags/main",
            workflow_ref=f"{RUNNER_REPO}/.github/workflows/gpu-runner.yml@refs/tags/main")}),
    "gpu-runner.yml started by a push": ("ref", {"runner": _runner(event_name="push")}),
    "a maintainer's hand-made dispatch": (
        "sender", {"runner": _runner(sender="maintainer", triggering_actor="maintainer")}),
    "main's dispatch re-run by a person": (
        "sender", {"runner": _runner(triggering_actor="maintainer")}),
    "a re-run of main's dispatch": ("attempt", {"runner": _runner(run_attempt="2")}),
    "a dispatch naming another repository": (
        "source", {"dispatch": _dispatch(source_repo="someone/amptrain")}),
    "a short SHA": ("source", {"dispatch": _dispatch(sha="a" * 7)}),
    "an image by tag": ("source", {"dispatch": _dispatch(image=IMAGE.split("@")[0] + ":v1")}),
    "a source run of a copied gpu.yml": (
        "source run", {"answers": _answer(SOURCE_RUN, lambda r: r.update(
            path=".github/workflows/copy.yml"))}),
    "a source run of gpu.yml on a branch": (
        "source run", {"answers": _answer(SOURCE_RUN, lambda r: r.update(head_branch="x"))}),
    "a replayed dispatch of a finished run": (
        "source run", {"answers": _answer(SOURCE_RUN, lambda r: r.update(status="completed"))}),
    "a dispatch of another attempt of the run": (
        "source run", {"answers": _answer(SOURCE_RUN, lambda r: r.update(run_attempt=2))}),
    "a commit the App never admitted": (
        "admission", {"answers": _answer(STATUSES, lambda s: s.pop(0))}),
    "an admission by another run": (
        "admission", {"answers": _answer(STATUSES, lambda s: s[0].update(
            target_url=f"https://github.com/{REPO}/actions/runs/554"))}),
    "an admission forged with a workflow token": (
        "admission", {"answers": _answer(STATUSES, lambda s: s[0].update(
            creator={"login": "github-actions[bot]"}))}),
    "the same dispatch sent twice": (
        "once", {"answers": _answer(RUNNER_RUNS, lambda r: r["workflow_runs"].append(
            {"id": 899, "display_title": DISPATCH.key()}))}),
}  # fmt: skip


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_check_alone_refuses_its_attacker(attack: str) -> None:
    check, plant = ATTACKS[attack]
    assert refused(**plant) == [check]


def test_every_check_has_an_attacker_it_alone_refuses() -> None:
    assert {check for check, _ in ATTACKS.values()} == set(gpu_dispatch.CHECKS)


def test_a_later_dispatch_with_the_same_key_is_not_the_first_one() -> None:
    # the earlier of two identical dispatches runs; the later one is the replay
    answers = _answer(RUNNER_RUNS, lambda r: r["workflow_runs"].append(
        {"id": 901, "display_title": DISPATCH.key()}))  # fmt: skip
    assert refused(answers=answers) == []


def test_send_dispatches_the_runner_workflow_on_its_default_branch() -> None:
    api = FakeApi({})
    gpu_dispatch.send(api, RUNNER_REPO, "main", DISPATCH)
    (path, body), = api.posted  # fmt: skip
    assert path == f"/repos/{RUNNER_REPO}/actions/workflows/gpu-runner.yml/dispatches"
    assert body == {"ref": "main", "inputs": dataclasses.asdict(DISPATCH)}
    with pytest.raises(gpu_dispatch.ContractError, match="digest"):
        gpu_dispatch.send(api, RUNNER_REPO, "main", _dispatch(image="amptrain-verify:local"))


def test_wait_takes_the_apps_run_and_ignores_one_named_alike() -> None:
    runs = [
        {"id": 898, "display_title": DISPATCH.key(), "status": "completed",
         "conclusion": "success", "triggering_actor": {"login": "maintainer"}},
        {"id": 900, "display_title": DISPATCH.key(), "status": "completed",
         "conclusion": "failure", "triggering_actor": {"login": APP}},
    ]  # fmt: skip
    api = FakeApi({RUNNER_RUNS: {"workflow_runs": runs}})
    assert gpu_dispatch.wait(api, RUNNER_REPO, DISPATCH.key(), APP, sleep=lambda s: None) == (
        900, "failure")  # fmt: skip
    with pytest.raises(gpu_dispatch.ContractError, match="no completed run"):
        gpu_dispatch.wait(api, RUNNER_REPO, "gpu other#1.1", APP, sleep=lambda s: None,
                          limit_s=60)  # fmt: skip


# ---- the workflows around the contract -------------------------------------------------------


def _runs_on(job: dict[str, Any]) -> list[str]:
    labels = job.get("runs-on")
    return [labels] if isinstance(labels, str) else list(labels or [])


@pytest.mark.slow
def test_no_workflow_of_this_repository_names_a_self_hosted_runner() -> None:
    for path in WORKFLOWS.glob("*.yml"):
        for name, job in load_workflow(path.name)["jobs"].items():
            assert "self-hosted" not in _runs_on(job), (path.name, name)


def test_the_runner_workflow_runs_the_commit_only_after_the_contract() -> None:
    doc = yaml.safe_load(TEMPLATE.read_text())
    doc["on"] = doc.pop(True)
    assert set(doc["on"]) == {"workflow_dispatch"} and doc["permissions"] == {}
    contract, bench = doc["jobs"]["contract"], doc["jobs"]["benchmark"]
    assert "self-hosted" not in _runs_on(contract) and "self-hosted" in _runs_on(bench)
    assert bench["needs"] == ["contract"] and bench["permissions"] == {"contents": "read"}
    (checkout,) = [s for s in contract["steps"] if "checkout@" in s.get("uses", "")]
    assert checkout["with"]["repository"] == "${{ vars.GATE_SOURCE_REPO }}"
    assert checkout["with"]["ref"] == "main"
    runs = [s.get("run", "") for s in contract["steps"]]
    assert runs.index("python3 tools/ci/gpu_dispatch.py verify") == 1  # before anything else
    assert "attestations.py verify" in runs[-1] and "--workflow image.yml" in runs[-1]
    assert "secrets." not in TEMPLATE.read_text()
    fields = {f.name for f in dataclasses.fields(gpu_dispatch.Dispatch)}
    assert set(doc["on"]["workflow_dispatch"]["inputs"]) == fields
    assert doc["run-name"] == (
        "gpu ${{ inputs.source_repo }}#${{ inputs.source_run_id }}.${{ inputs.source_run_attempt }}"
    )  # the key gpu_dispatch.Dispatch.key() writes and the checks read


@pytest.mark.slow
def test_gpu_yml_dispatches_with_an_actions_token_for_the_runner_repository_alone() -> None:
    job = load_workflow("gpu.yml")["jobs"]["dispatch"]
    assert job["environment"] == "gate" and job["needs"] == ["authorize", "mark"]
    mint = next(s for s in job["steps"] if "create-github-app-token@" in s.get("uses", ""))
    assert {k for k in mint["with"] if k.startswith("permission-")} == {"permission-actions"}
    assert mint["with"]["repositories"] == "${{ vars.GPU_RUNNER_REPOSITORY }}"
    send = next(s for s in job["steps"] if "gpu_dispatch.py send" in s.get("run", ""))
    assert send["env"]["GH_TOKEN"] == f"${{{{ steps.{mint['id']}.outputs.token }}}}"
    status = load_workflow("gpu.yml")["jobs"]["status"]["steps"]
    assert not any("gpu_dispatch" in s.get("run", "") for s in status)


@pytest.mark.slow
@pytest.mark.parametrize("linter", ["zizmor", "check-jsonschema"])
def test_the_runner_workflow_is_clean_under_the_linters(linter: str) -> None:
    from .test_linters import _tool

    if linter == "zizmor":
        command = [_tool("zizmor"), "--offline", "--no-exit-codes", "--format", "json",
                   "--persona", "auditor", str(TEMPLATE)]  # fmt: skip
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == []
        return
    command = [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
               str(TEMPLATE)]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_runner_workflows_scripts_are_clean_under_shellcheck() -> None:
    from .test_linters import static_checks

    previous, static_checks.WORKFLOWS = static_checks.WORKFLOWS, [str(TEMPLATE)]
    try:
        assert static_checks.shellcheck() == []
    finally:
        static_checks.WORKFLOWS = previous
