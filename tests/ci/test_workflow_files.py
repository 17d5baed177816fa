"""The workflow files as written: who may write what, which code each job runs, how actions
are pinned, and what the jobs that judge or reach the GPU host are allowed to do. The events
that reach them are tried in test_workflows.py."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from .ci_tools import WORKFLOWS, load_workflow

DOCS = {p.name: load_workflow(p.name) for p in sorted(WORKFLOWS.glob("*.yml"))}
# The workflows that hold write permissions or the gate App's key; none runs for a pull request.
# stagegate.yml is called for one, but its job in the environment runs only on workflow_run.
TRUSTED = ("judge.yml", "gpu.yml", "image.yml", "sweep.yml", "stagegate.yml")


def _checkouts(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")]


@pytest.mark.parametrize("name", sorted(DOCS))
def test_only_default_branch_workflows_hold_write_permissions(name: str) -> None:
    doc = DOCS[name]
    writes = {
        scope
        for job in doc["jobs"].values()
        for scope, level in (job.get("permissions") or {}).items()
        if level == "write"
    } | {"environment" for job in doc["jobs"].values() if "environment" in job}
    if name not in TRUSTED:
        assert not writes, f"{name} runs the change's code and asks for {writes}"
    else:  # never started by a pull request, nor by a push to any branch but main
        assert not {"pull_request", "pull_request_target", "merge_group"} & set(doc["on"])
        assert doc["on"].get("push", {}).get("branches", ["main"]) == ["main"]


def test_no_workflow_token_may_set_a_commit_status() -> None:
    # The required checks come from the gate App alone (test_gate_identity.py); a job token
    # with statuses: write could only add noise the ruleset ignores.
    for name, doc in DOCS.items():
        for job_name, job in doc["jobs"].items():
            assert (job.get("permissions") or {}).get("statuses") != "write", (name, job_name)


@pytest.mark.parametrize("name", ["judge.yml", "gpu.yml", "sweep.yml"])
def test_trusted_jobs_run_only_the_default_branch_scripts(name: str) -> None:
    for job_name, job in DOCS[name]["jobs"].items():
        for step in _checkouts(job):
            ref = step.get("with", {}).get("ref")
            # the commit under test and its base (the A/B's other side), as data
            if step["with"].get("path") == "pr":  # the commit to run, as data, in the image
                assert (name, job_name) == ("judge.yml", "stages")
                assert ref == "${{ needs.change.outputs.commit }}"
                continue
            assert ref in (None, "${{ github.event.repository.default_branch }}"), job_name
            if ref is None:  # no ref is the default branch only on these events
                assert set(DOCS[name]["on"]) <= {"workflow_run", "schedule"}, job_name


def test_the_gpu_host_runs_the_commit_only_inside_the_pinned_image() -> None:
    runner = yaml.safe_load((WORKFLOWS.parent / "gpu-runner" / "gpu-runner.yml").read_text())
    job = runner["jobs"]["benchmark"]
    assert job["permissions"] == {"contents": "read"}
    assert "secrets." not in yaml.safe_dump(job)
    paths = [step["with"].get("path") for step in _checkouts(job)]
    assert paths == ["trusted", "pr", "base"]
    scripts = [step["run"] for step in job["steps"] if "run" in step]
    text = "\n".join(scripts)
    assert "trusted/tools/ci/gpu_stage.sh pr " in text
    forbidden_words = ("docker build", "image.sh", "nox", "pr/", "./pr", "bash pr", "source")
    for forbidden in (*forbidden_words, "base/", "./base", "bash base"):
        assert forbidden not in text, forbidden
    assert "trusted/tools/ci/gate_env.sh" in text  # the host's stagegate is the default branch's
    run = next(s for s in job["steps"] if "gpu_stage.sh" in s.get("run", ""))
    assert run["env"]["IMAGE"] == "${{ inputs.image }}"
    image = DOCS["gpu.yml"]["jobs"]["authorize"]["steps"]
    assert any("trusted_artifacts.py image" in s.get("run", "") for s in image)


def test_the_pull_request_workflow_produces_nothing() -> None:
    (job,) = DOCS["verify.yml"]["jobs"].values()
    text = yaml.safe_dump(job)
    assert "stagegate" not in text and "nox" not in text and "uses:" not in text


@pytest.mark.parametrize(("doc", "job"), [("judge.yml", "judge"), ("gpu.yml", "status")])
def test_the_judges_read_artifacts_only_through_the_layout_check(doc: str, job: str) -> None:
    steps = DOCS[doc]["jobs"][job]["steps"]
    raw = next(s for s in steps if s.get("with", {}).get("name", "").startswith("raw-"))
    judge = next(s for s in steps if "judge_records.py" in s.get("run", ""))
    assert f'--artifact "$RUNNER_TEMP/{raw["with"]["path"].split("/")[-1]}"' in judge["run"]
    assert "--pyproject" not in judge["run"]  # judge_records passes the base checkout's own
    assert "--base ." in judge["run"] and "--changed-files" in judge["run"]
    assert judge["env"]["STAGEGATE"] == "${{ runner.temp }}/gate/bin/stagegate"
    install = next(s for s in steps if "gate_env.sh" in s.get("run", ""))
    assert steps.index(install) < steps.index(judge)  # the hash-pinned tools, main's stagegate


def test_baselines_images_and_base_records_are_looked_up_only_among_the_default_branch_runs() -> (
    None
):
    lookups = [
        " ".join(step["run"].split())
        for doc in DOCS.values()
        for job in doc["jobs"].values()
        for step in job["steps"]
        if "trusted_runs.py" in step.get("run", "")
    ]
    image = (
        "--workflow image.yml --events push,workflow_dispatch,schedule"
        " --artifact verification-image"
    )
    baseline = "--workflow gpu.yml --events push --artifact benchmark-baseline"
    base_records = "--workflow judge.yml --events workflow_run --artifact base-records"
    assert sorted(lookups) == sorted(
        [f"python3 tools/ci/trusted_runs.py {image}"] * 2
        + [f"python3 tools/ci/trusted_runs.py {baseline}"]
        + [f"python3 tools/ci/trusted_runs.py {base_records}"]
    )


ALLOWED = {
    ("verify.yml", "request"): {},
    ("judge.yml", "pending"): {"contents": "read", "actions": "read", "pull-requests": "read"},
    ("judge.yml", "change"): {
        "contents": "read", "actions": "read", "pull-requests": "read", "attestations": "read",
    },
    ("judge.yml", "stages"): {"contents": "read"},
    ("judge.yml", "judge"): {"contents": "read", "actions": "read", "attestations": "read"},
    ("judge.yml", "attest-base"): {"id-token": "write", "attestations": "write"},
    ("judge.yml", "report"): {"contents": "read"},
    ("judge.yml", "comment"): {"pull-requests": "write"},
    ("sweep.yml", "sweep"): {"contents": "read", "pull-requests": "read", "statuses": "read"},
    ("gpu.yml", "authorize"): {
        "contents": "read", "pull-requests": "read", "actions": "read", "attestations": "read",
        "statuses": "read",
    },
    ("gpu.yml", "mark"): {"contents": "read"},
    ("gpu.yml", "dispatch"): {"contents": "read"},
    ("gpu.yml", "status"): {"contents": "read", "actions": "read", "attestations": "read"},
    ("gpu.yml", "attest-baseline"): {"id-token": "write", "attestations": "write"},
    ("gpu.yml", "report"): {"contents": "read"},
    ("gpu.yml", "authorize-failed"): {"contents": "read"},
    ("image.yml", "publish"): {
        "contents": "read", "packages": "write", "id-token": "write", "attestations": "write",
    },
    ("mutation.yml", "mutation"): {"contents": "read"},
    ("stagegate.yml", "stages"): {"contents": "read"},
    ("stagegate.yml", "judge"): {"contents": "read", "actions": "read"},
    ("stagegate.yml", "report"): {},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(DOCS))
def test_permissions_are_empty_at_the_top_and_minimal_per_job(name: str) -> None:
    doc = DOCS[name]
    assert doc["permissions"] == {}
    for job_name, job in doc["jobs"].items():
        assert job["permissions"] == ALLOWED[(name, job_name)], job_name
        assert "timeout-minutes" in job


def test_mutation_testing_runs_weekly_and_uploads_its_report() -> None:
    triggers = DOCS["mutation.yml"]["on"]
    assert set(triggers) == {"schedule", "workflow_dispatch"}  # never a merge gate: hours long
    (cron,) = (entry["cron"] for entry in triggers["schedule"])
    assert cron.split()[2:] == ["*", "*", "1"]  # once a week
    steps = DOCS["mutation.yml"]["jobs"]["mutation"]["steps"]
    assert any("nox" in step.get("run", "") and "-s mutation" in step["run"] for step in steps)
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/mutation"


# Current majors (Node 24): each SHA is the commit of the tag in the comment.
MINIMUM_MAJOR = {
    "actions/checkout": 5,
    "actions/upload-artifact": 6,
    "actions/download-artifact": 7,
    "actions/github-script": 8,
    "actions/create-github-app-token": 3,
    "actions/attest-build-provenance": 4,
}
PINNED = re.compile(r"^(?P<action>[\w.-]+/[\w.-]+)@[0-9a-f]{40} # v(?P<major>\d+)(\.\d+)*$")


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_action_is_a_current_major_pinned_by_full_sha(name: str) -> None:
    uses = re.findall(r"^\s*(?:- )?uses: (.+)$", (WORKFLOWS / name).read_text(), re.MULTILINE)
    assert uses or name == "verify.yml"  # the change's own file uses no action at all
    for ref in uses:
        m = PINNED.match(ref.strip())
        assert m, ref
        assert int(m["major"]) >= MINIMUM_MAJOR[m["action"]], ref


def test_checkouts_do_not_persist_credentials() -> None:
    for doc in DOCS.values():
        for job in doc["jobs"].values():
            for step in _checkouts(job):
                assert step["with"]["persist-credentials"] is False


def test_no_expression_is_expanded_inside_a_shell_script() -> None:
    for doc in DOCS.values():
        for job in doc["jobs"].values():
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), step.get("name")


def test_the_comment_job_never_checks_out_or_runs_pull_request_code() -> None:
    job = DOCS["judge.yml"]["jobs"]["comment"]
    assert not _checkouts(job) and not any("run" in s for s in job["steps"])
    download = next(s for s in job["steps"] if "download-artifact" in s.get("uses", ""))
    assert "run-id" not in download["with"]  # this run's own artifact, from the base stagegate
    script = next(s for s in job["steps"] if "github-script" in s.get("uses", ""))["with"]["script"]
    assert "pr.head.sha !== process.env.HEAD_SHA" in script
    assert "<!-- stagegate:verification-report -->" in script
    assert job["steps"][1]["env"]["PR_NUMBER"] == "${{ needs.change.outputs.pr }}"


def test_the_gpu_judge_refuses_records_of_any_commit_but_the_one_it_admitted() -> None:
    steps = DOCS["gpu.yml"]["jobs"]["status"]["steps"]
    judge = next(s for s in steps if "judge_records.py" in s.get("run", ""))
    (setter,) = [
        s for s in DOCS["gpu.yml"]["jobs"]["report"]["steps"]
        if "verdict_status.py final" in s.get("run", "")
    ]  # fmt: skip
    assert '--commit "$SHA"' in judge["run"]
    assert judge["env"]["SHA"] == setter["env"]["SHA"]  # the commit whose status is set
