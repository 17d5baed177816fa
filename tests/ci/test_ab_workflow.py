"""gpu.yml's A/B regression stage: the base commit gpu_gate.py names (a push's parent, a pull
request's merge base), dispatched to the GPU runner, checked out there as data and handed to
gpu_stage.sh, and the status job judging the regression stage as required, against that base."""

from __future__ import annotations

import yaml

from .ci_tools import REPO, ROOT, FakeApi, load_workflow, tool

gpu_gate = tool("gpu_gate")
CTX = gpu_gate.Context(REPO, "main", f"{REPO}/.github/workflows/gpu.yml@refs/heads/main", "x")
HEAD, PARENT, MERGE_BASE = "a" * 40, "b" * 40, "c" * 40
GPU = load_workflow("gpu.yml")


def test_a_push_is_measured_against_its_parent() -> None:
    api = FakeApi({f"/repos/{REPO}/commits/{HEAD}": {"parents": [{"sha": PARENT}]}})
    decision = gpu_gate.Decision(True, HEAD, baseline=True)
    assert gpu_gate.base_commit(decision, CTX, api.get) == PARENT


def test_a_pull_request_is_measured_against_its_merge_base() -> None:
    compare = {"merge_base_commit": {"sha": MERGE_BASE}}
    api = FakeApi({f"/repos/{REPO}/compare/main...{HEAD}": compare})
    assert gpu_gate.base_commit(gpu_gate.Decision(True, HEAD), CTX, api.get) == MERGE_BASE


def test_no_base_or_a_malformed_one_is_none() -> None:
    api = FakeApi({
        f"/repos/{REPO}/commits/{HEAD}": {"parents": []},
        f"/repos/{REPO}/compare/main...{HEAD}": {"merge_base_commit": {"sha": "$(id)"}},
    })  # fmt: skip
    assert gpu_gate.base_commit(gpu_gate.Decision(True, HEAD, baseline=True), CTX, api.get) == ""
    assert gpu_gate.base_commit(gpu_gate.Decision(True, HEAD), CTX, api.get) == ""


def test_the_base_reaches_the_gpu_host_and_the_judge_requires_the_regression_stage() -> None:
    jobs = GPU["jobs"]
    assert jobs["authorize"]["outputs"]["base"] == "${{ steps.gate.outputs.base }}"
    send = next(s for s in jobs["dispatch"]["steps"] if "gpu_dispatch.py" in s.get("run", ""))
    assert send["env"]["BASE_SHA"] == "${{ needs.authorize.outputs.base }}"
    runner = yaml.safe_load((ROOT / ".github" / "gpu-runner" / "gpu-runner.yml").read_text())
    bench = runner["jobs"]["benchmark"]["steps"]
    checkout = next(s for s in bench if s.get("with", {}).get("path") == "base")
    assert checkout["with"]["ref"] == "${{ inputs.base }}"
    assert checkout["with"]["persist-credentials"] is False
    run = next(s for s in bench if "gpu_stage.sh" in s.get("run", ""))
    assert run["env"]["BASE_SHA"] == "${{ inputs.base }}"
    assert "BASE_TREE=base" in run["run"]
    judge = next(s for s in jobs["status"]["steps"] if s.get("id") == "judge")
    assert judge["env"]["AB_BASE"] == "${{ needs.authorize.outputs.base }}"
    wanted = ("--stage regression", "--require regression", "--ab-base", "--only regression")
    for part in (*wanted, "--stage cuda", "--only cuda", "--require cuda"):
        assert part in judge["run"], part
