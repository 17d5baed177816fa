"""The attacks on what the trusted side reads: records that point outside their folder,
baselines and images from runs that are not the default branch's own, changes that touch the
gate's own files, and a GPU workflow started from anywhere but its file on the default branch.
Each is fired at the decision code in tools/ci and must be refused or flagged."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from .ci_tools import FORK, REPO, FakeApi, tool

raw_layout = tool("raw_layout")
trusted_runs = tool("trusted_runs")
trusted_artifacts = tool("trusted_artifacts")
pr_change = tool("pr_change")
gpu_gate = tool("gpu_gate")

SHA = "a" * 40
DIGEST = "ghcr.io/owner/amptrain-verify@sha256:" + "d" * 64


def record(stage: str, files: dict[str, Any], commit: str = SHA) -> dict[str, Any]:
    return {
        "format_version": 1, "kind": "stagegate-record", "stage": stage, "command": ["x"],
        "exit_code": 0, "start": "2026-01-01T00:00:00Z", "duration_s": 1.0, "commit": commit,
        "files": files,
    }  # fmt: skip


def artifact(tmp_path: Path, *records: dict[str, Any], extra: dict[str, str] | None = None) -> Path:
    """An artifact as download-artifact lays out the upload of reports/raw."""
    root = tmp_path / "artifact"
    root.mkdir()
    for rec in records:
        (root / f"{rec['stage']}.json").write_text(json.dumps(rec))
    for name, text in {
        "junit-unit.xml": "<testsuite/>",
        "lint/ruff.json": "[]",
        **(extra or {}),
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


# ---- records laid out for the judge ---------------------------------------------------------


def test_records_inside_their_folder_are_laid_out(tmp_path: Path) -> None:
    art = artifact(
        tmp_path,
        record("execution", {"junit": "reports/raw/junit-unit.xml"}),
        record("static", {"lint": {"ruff": "reports/raw/lint/ruff.json"}}),
    )
    raw = tmp_path / "judge" / "reports" / "raw"
    assert raw_layout.lay_out(art, raw, ["static", "execution"]) == ["execution", "static"]
    assert (raw / "lint" / "ruff.json").read_text() == "[]"


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("reports/baseline/benchmark-h100-80gb-hbm3.json", "outside"),  # main's own baseline
        ("reports/rawx/benchmark-h100-80gb-hbm3.json", "outside"),
        ("pyproject.toml", "outside"),
        ("/home/runner/work/amptrain/amptrain/reports/raw/junit-unit.xml", "plain relative"),
        ("reports/raw/../baseline/benchmark-h100-80gb-hbm3.json", "plain relative"),
        ("reports/raw/./junit-unit.xml", "plain relative"),
        ("reports/raw//junit-unit.xml", "plain relative"),
        ("reports\\raw\\junit-unit.xml", "plain relative"),
        ("reports/raw", "outside"),
        ("", "plain relative"),
    ],
)
def test_a_record_naming_a_file_outside_its_folder_is_refused(
    tmp_path: Path, path: str, why: str
) -> None:
    # The artifact also holds files of those names, so only the path check can refuse them.
    decoys = {"benchmark-h100-80gb-hbm3.json": "{}", "pyproject.toml": "", "baseline/x": ""}
    art = artifact(tmp_path, record("performance", {"benchmark": path}), extra=decoys)
    raw = tmp_path / "raw"
    with pytest.raises(raw_layout.LayoutError, match=why):
        raw_layout.lay_out(art, raw, ["performance"])
    assert not raw.exists(), "nothing is laid out when anything is refused"


def test_a_link_in_the_artifact_is_refused(tmp_path: Path) -> None:
    art = artifact(tmp_path, record("performance", {"benchmark": "reports/raw/benchmark.json"}))
    os.symlink("/etc/passwd", art / "benchmark.json")
    with pytest.raises(raw_layout.LayoutError, match="link"):
        raw_layout.lay_out(art, tmp_path / "raw", ["performance"])


@pytest.mark.parametrize(
    ("records", "stages", "commit"),
    [
        ([record("performance", {})], ["static"], None),  # a stage this judge does not take
        ([record("static", {}), {**record("static", {}), "stage": "static"}], ["static"], None),
        ([record("performance", {}, commit="b" * 40)], ["performance"], SHA),  # another commit
        ([record("performance", {"benchmark": "reports/raw/missing.json"})], ["performance"], None),
        ([record("performance", {"benchmark": 7})], ["performance"], None),
        ([record("performance", ["reports/raw/x"])], ["performance"], None),  # type: ignore[arg-type]
        ([], ["performance"], None),  # no record at all
    ],
)
def test_records_that_are_not_the_stages_own_are_refused(
    tmp_path: Path, records: list[dict[str, Any]], stages: list[str], commit: str | None
) -> None:
    art = tmp_path / "artifact"
    art.mkdir()
    for i, rec in enumerate(records):
        (art / f"r{i}.json").write_text(json.dumps(rec))
    with pytest.raises(raw_layout.LayoutError):
        raw_layout.lay_out(art, tmp_path / "raw", stages, commit=commit)


def test_a_missing_artifact_is_refused_with_a_clear_reason(tmp_path: Path) -> None:
    with pytest.raises(raw_layout.LayoutError, match="no artifact"):
        raw_layout.lay_out(tmp_path / "nothing", tmp_path / "raw", ["static"])


# ---- runs that may supply the image digest and the baseline ---------------------------------

ORIGIN = trusted_runs.Origin(REPO, "main", "gpu.yml", frozenset({"push"}))


def run(**changes: Any) -> dict[str, Any]:
    base = {
        "id": 41, "path": ".github/workflows/gpu.yml", "head_branch": "main", "event": "push",
        "head_repository": {"full_name": REPO}, "repository": {"full_name": REPO},
        "status": "completed", "conclusion": "success", "head_sha": "c" * 40,
    }  # fmt: skip
    return {**base, **changes}


def on_main(status: str = "ahead", sha: str = "c" * 40) -> dict[str, Any]:
    """The compare API's answer for ``sha`` against main: ``ahead`` (main contains it)."""
    return {f"/repos/{REPO}/compare/{sha}...main": {"status": status}}


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"head_branch": "feature"}, "ran on 'feature'"),  # a baseline from a branch
        ({"event": "pull_request"}, "pull_request"),
        ({"event": "workflow_dispatch"}, "workflow_dispatch"),
        ({"head_repository": {"full_name": FORK}}, FORK),  # a fork's branch named main
        ({"path": ".github/workflows/evil.yml"}, "evil.yml"),
        ({"path": f"{REPO}/.github/workflows/gpu.yml@refs/heads/feature"}, "gpu.yml@"),
        ({"path": f"{FORK}/.github/workflows/gpu.yml@refs/heads/main"}, "gpu.yml@"),
        ({"conclusion": "failure"}, "failure"),
        ({"status": "in_progress", "conclusion": None}, "in_progress"),
    ],
)
def test_runs_that_are_not_the_default_branch_push_runs_are_refused(
    changes: dict[str, Any], why: str
) -> None:
    reason = trusted_runs.refusal(run(**changes), ORIGIN)
    assert reason and why in reason


def test_the_default_branch_push_run_is_accepted_in_either_path_form() -> None:
    assert trusted_runs.refusal(run(), ORIGIN) is None
    full = f"{REPO}/.github/workflows/gpu.yml@refs/heads/main"
    assert trusted_runs.refusal(run(path=full), ORIGIN) is None


def test_select_skips_a_branch_run_and_takes_the_newest_main_run_with_the_artifact() -> None:
    api = FakeApi(
        {
            f"/repos/{REPO}/actions/workflows/gpu.yml/runs": {
                "workflow_runs": [run(id=3, head_branch="poison"), run(id=2), run(id=1)]
            },
            f"/repos/{REPO}/actions/runs/2/artifacts": {"artifacts": [
                {"name": "benchmark-baseline", "expired": True}]},
            f"/repos/{REPO}/actions/runs/1/artifacts": {"artifacts": [
                {"name": "benchmark-baseline", "expired": False}]},
            **on_main(),
        }
    )  # fmt: skip
    found = trusted_runs.select(api, ORIGIN, "benchmark-baseline")
    assert found.run_id == 1
    assert "run 3 ran on 'poison'" in found.refusals[0] and "run 2" in found.refusals[1]
    assert all(path != f"/repos/{REPO}/actions/runs/3/artifacts" for _, path, _ in api.calls)


@pytest.mark.parametrize(
    ("head", "status", "why"),
    [
        ("c" * 40, "diverged", "not on main"),  # a pushed tag named main, its own workflow
        ("c" * 40, "behind", "not on main"),  # a commit main has not reached
        (None, "ahead", "names no commit"),
        ("C" * 40 + "; x", "ahead", "names no commit"),
    ],
)
def test_a_run_whose_commit_is_not_on_the_default_branch_is_refused(
    head: str | None, status: str, why: str
) -> None:
    api = FakeApi({
        f"/repos/{REPO}/actions/workflows/gpu.yml/runs": {"workflow_runs": [run(head_sha=head)]},
        f"/repos/{REPO}/actions/runs/41/artifacts": {"artifacts": [
            {"name": "benchmark-baseline", "expired": False}]},
        **on_main(status),
    })  # fmt: skip
    found = trusted_runs.select(api, ORIGIN, "benchmark-baseline")
    assert found.run_id is None and why in found.refusals[0], found.refusals


def test_with_no_qualifying_run_there_is_no_baseline() -> None:
    api = FakeApi({
        f"/repos/{REPO}/actions/workflows/gpu.yml/runs": {"workflow_runs": [run(event="schedule")]},
    })  # fmt: skip
    found = trusted_runs.select(api, ORIGIN, "benchmark-baseline")
    assert found.run_id is None and found.refusals


# ---- what those runs' artifacts hold ---------------------------------------------------------


def write_json(folder: Path, name: str, doc: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ({"image": "ghcr.io/owner/amptrain-verify:latest", "run_id": "5"}, "not ghcr.io"),
        ({"image": "ghcr.io/other/amptrain-verify@sha256:" + "d" * 64, "run_id": "5"}, "other"),
        ({"image": DIGEST, "run_id": "6"}, "run '6'"),
        ({"image": DIGEST + " --privileged", "run_id": "5"}, "not ghcr.io"),
    ],
)
def test_an_image_by_tag_or_of_another_run_or_owner_is_refused(
    tmp_path: Path, doc: dict[str, Any], why: str
) -> None:
    write_json(tmp_path, "image.json", doc)
    with pytest.raises(trusted_artifacts.ArtifactError, match=why):
        trusted_artifacts.image_ref(tmp_path, "5", "Owner")


def test_the_published_digest_is_accepted(tmp_path: Path) -> None:
    write_json(tmp_path, "image.json", {"image": DIGEST, "run_id": 5, "definition": "x"})
    assert trusted_artifacts.image_ref(tmp_path, "5", "Owner") == DIGEST


MACHINE = {"gpu_name": "NVIDIA H100 80GB HBM3", "torch": "2.13.0+cu126", "cuda": "12.6"}


def baseline_candidate(tmp_path: Path, **bench_changes: Any) -> Path:
    """What gpu.yml's push run uploads, built by trusted_artifacts.provenance itself."""
    write_json(
        tmp_path / "in",
        "host.json",
        {"sha": SHA, "image": DIGEST, "gpu_name": "NVIDIA H100 80GB HBM3", "driver": "580.1"},
    )
    bench = {"device": "cuda", "gpu_verified": True, "machine_info": MACHINE, **bench_changes}
    write_json(tmp_path / "in", "benchmark.json", bench)
    out = tmp_path / "baseline"
    trusted_artifacts.provenance(
        out, sha=SHA, run_id="41", image=DIGEST, host=tmp_path / "in" / "host.json",
        benchmark=tmp_path / "in" / "benchmark.json",
    )  # fmt: skip
    return out


def test_a_baseline_records_device_torch_cuda_and_image_and_is_accepted(tmp_path: Path) -> None:
    out = baseline_candidate(tmp_path)
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["image"] == DIGEST and prov["driver"] == "580.1"
    assert (prov["torch"], prov["cuda"], prov["gpu_name"]) == (
        "2.13.0+cu126", "12.6", "NVIDIA H100 80GB HBM3")  # fmt: skip
    assert trusted_artifacts.accept_baseline(out, "41") == out / "benchmark.json"


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        (lambda d: (d / "provenance.json").unlink(), "provenance.json"),
        (lambda d: (d / "benchmark.json").write_text("[]"), "not a JSON object"),
        (lambda d: _edit(d / "provenance.json", image=DIGEST.split("@")[0] + ":v1"), "digest"),
        (lambda d: _edit(d / "provenance.json", torch=""), "torch"),
        (lambda d: _edit(d / "benchmark.json", device="cpu"), "CUDA"),
        (lambda d: _edit(d / "benchmark.json", machine_info={**MACHINE, "torch": "2.1"}), "torch"),
    ],
)  # fmt: skip
def test_a_malformed_baseline_is_refused_with_its_reason(tmp_path: Path, tamper, why: str) -> None:
    out = baseline_candidate(tmp_path)
    tamper(out)
    with pytest.raises(trusted_artifacts.ArtifactError, match=why):
        trusted_artifacts.accept_baseline(out, "41")


def test_a_baseline_found_in_another_run_than_it_names_is_refused(tmp_path: Path) -> None:
    with pytest.raises(trusted_artifacts.ArtifactError, match="run 41"):
        trusted_artifacts.accept_baseline(baseline_candidate(tmp_path), "42")


def test_a_refused_baseline_is_a_clear_not_verified(tmp_path: Path, monkeypatch) -> None:
    out = baseline_candidate(tmp_path)
    _edit(out / "provenance.json", cuda="")
    outputs = tmp_path / "outputs"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    code = trusted_artifacts.main(
        ["baseline", str(out), "--run-id", "41", "--into", str(tmp_path / "b")]
    )
    text = outputs.read_text()
    assert code == 0 and "baseline-dir=\n" in text and "regression NOT VERIFIED" in text
    assert not (tmp_path / "b").exists()


def _edit(path: Path, **changes: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


# ---- the change's files, for the summary's list of gate files --------------------------------


def compare_api(files: list[dict[str, str]]) -> FakeApi:
    return FakeApi({f"/repos/{REPO}/compare/main...{SHA}": {"files": files}})


def test_a_change_to_the_gate_lists_every_gate_file_it_touches(tmp_path: Path) -> None:
    files = [
        {"filename": "pyproject.toml", "status": "modified"},  # the policy
        {"filename": "stagegate/src/stagegate/judge.py", "status": "modified"},
        {"filename": "noxfile.py", "status": "modified"},
        {"filename": ".github/workflows/verify.yml", "status": "removed"},
        {"filename": "tools/ci/gate.py", "previous_filename": "tools/ci/gpu_gate.py"},
        {"filename": "src/amptrain/loop.py", "status": "modified"},
    ]  # fmt: skip
    event = {
        "workflow_run": {"path": ".github/workflows/verify.yml", "repository": {"full_name": REPO},
                         "head_sha": SHA, "event": "merge_group"},
        "repository": {"default_branch": "main"},
    }  # fmt: skip
    out = tmp_path / "changed.txt"
    outputs = pr_change.describe(compare_api(files), REPO, event, out)
    listed = out.read_text().splitlines()
    assert outputs["judge"] == "true" and outputs["problem"] == ""
    gate = {"pyproject.toml", "stagegate/src/stagegate/judge.py", "noxfile.py",
            ".github/workflows/verify.yml", "tools/ci/gpu_gate.py", "tools/ci/gate.py"}  # fmt: skip
    assert gate <= set(listed) and "src/amptrain/loop.py" in listed


def test_a_change_too_large_to_list_fails_instead_of_hiding_gate_files(tmp_path: Path) -> None:
    files = [{"filename": f"f{i}.py"} for i in range(pr_change.COMPARE_LIMIT)]
    out = tmp_path / "changed.txt"
    problem = pr_change._write(compare_api(files), REPO, "main", SHA, out)
    assert "300 files" in problem


@pytest.mark.parametrize("answer", [{}, {"files": None}, {"files": "pyproject.toml"}])
def test_a_compare_answer_without_its_files_fails_instead_of_reading_as_no_change(
    tmp_path: Path, answer: dict[str, Any]
) -> None:
    api = FakeApi({f"/repos/{REPO}/compare/main...{SHA}": answer})
    problem = pr_change._write(api, REPO, "main", SHA, tmp_path / "changed.txt")
    assert "listed no files" in problem


def test_a_run_of_another_file_named_verify_is_not_judged() -> None:
    run_ = {"path": ".github/workflows/evil.yml", "repository": {"full_name": REPO}}
    assert "evil.yml" in pr_change.is_verify(run_, REPO)


def test_a_forks_pull_request_is_found_by_its_head_not_by_the_artifact() -> None:
    run_ = {
        "head_sha": SHA, "head_branch": "main", "pull_requests": [],
        "head_repository": {"owner": {"login": "someone"}},
    }  # fmt: skip
    into = {"ref": "main", "repo": {"full_name": REPO}}
    api = FakeApi({
        f"/repos/{REPO}/pulls": lambda q: [
            {"number": 3, "head": {"sha": "c" * 40}, "base": into},
            {"number": 8, "head": {"sha": SHA}, "base": into},
        ] if q["head"] == "someone:main" and q["base"] == "main" else [],
    })  # fmt: skip
    assert pr_change.pull_request(api, REPO, run_, "main") == 8


# ---- the GPU workflow's own identity ---------------------------------------------------------


def ctx(workflow_ref: str, ref: str = "refs/heads/main") -> Any:
    return gpu_gate.Context(REPO, "main", workflow_ref, ref, SHA)


OWN = f"{REPO}/.github/workflows/gpu.yml@refs/heads/main"


@pytest.mark.parametrize(
    "workflow_ref",
    [
        f"{REPO}/.github/workflows/gpu.yml@refs/heads/feature",
        f"{REPO}/.github/workflows/copy.yml@refs/heads/main",
        f"{FORK}/.github/workflows/gpu.yml@refs/heads/main",
        f"{REPO}/.github/workflows/gpu.yml@refs/pull/7/merge",
    ],
)
def test_nothing_runs_unless_this_is_the_default_branchs_gpu_yml(workflow_ref: str) -> None:
    approval = {
        "issue": {"number": 7, "pull_request": {}},
        "comment": {"body": f"/gpu-approve {SHA}", "user": {"login": "maintainer"}},
    }
    pull = {"state": "open", "head": {"sha": SHA}, "user": {"login": "maintainer"}}
    decision = gpu_gate.decide(
        "issue_comment", approval, ctx(workflow_ref), lambda u: "admin", lambda n: pull
    )
    assert not decision.run and "not" in decision.reason
    same = gpu_gate.decide("issue_comment", approval, ctx(OWN), lambda u: "admin", lambda n: pull)
    assert same.run  # the same approval through the default branch's file runs


def test_a_dispatch_from_another_ref_is_refused_even_with_the_default_file() -> None:
    event = {"inputs": {"sha": SHA}, "sender": {"login": "maintainer"}}
    refused = gpu_gate.decide(
        "workflow_dispatch", event, ctx(OWN, ref="refs/heads/feature"), lambda u: "admin", dict
    )
    assert not refused.run and "refs/heads/feature" in refused.reason


def test_dependabot_and_bots_never_count_as_maintainers() -> None:
    permission = {"dependabot[bot]": "write", "maintainer": "write"}.get
    run_ = {
        "path": ".github/workflows/verify.yml", "event": "pull_request", "head_sha": SHA,
        "head_branch": "deps", "head_repository": {"full_name": REPO},
        "actor": {"login": "dependabot[bot]"}, "triggering_actor": {"login": "maintainer"},
        "pull_requests": [{"number": 7, "base": {"ref": "main"}}],
    }  # fmt: skip
    pull = {"user": {"login": "dependabot[bot]"}}
    decision = gpu_gate.decide(
        "workflow_run", {"workflow_run": run_}, ctx(OWN), lambda u: permission(u, "read"),
        lambda n: pull,
    )  # fmt: skip
    assert not decision.run and decision.pending and "dependabot[bot]" in decision.reason
