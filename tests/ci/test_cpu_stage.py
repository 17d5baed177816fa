"""The CPU stages run as the GPU stage does (tools/ci/cpu_stage.py, from judge.yml): each in the
pinned image with no network and the commit's tree read-only, each into an output folder of its
own, and each recorded by the default branch's stagegate on the host, never by the change.

There is no Docker engine here: `docker` is a stand-in on PATH that logs every call, notes what
the output folder held when the container started, and writes what the plan says a stage's
command would (or a link, or a forged record). The host's stagegate records for real, and the
judge's layout check reads the result for real."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .ci_tools import STAGEGATE, TOOLS, load_workflow, tool

cpu_stage = tool("cpu_stage")
raw_layout = tool("raw_layout")

SHA = "d" * 40
IMAGE = "ghcr.io/owner/amptrain-verify@sha256:" + "e" * 64
DOCKER = """#!{python}
import json, os, sys
args = sys.argv[1:]
log = os.environ["DOCKER_LOG"]
with open(log, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["run"]:
    out = next(v.split(":")[0] for v in args if v.endswith(":/out:rw"))
    stage = args[args.index("-c") + 2]
    with open(log + ".seen", "a") as f:
        f.write(json.dumps([stage, sorted(os.listdir(out))]) + "\\n")
    plan = json.loads(os.environ["PLAN"]).get(stage, {{}})
    for name, text in plan.get("files", {{}}).items():
        os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    for name in plan.get("links", []):
        os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
        os.symlink("/etc/passwd", os.path.join(out, name))
    sys.exit(plan.get("exit", 0))
"""
STAGES = cpu_stage.definitions()


def full_plan() -> dict[str, Any]:
    """Every stage writes every file it declares."""
    return {n: {"files": {o: "[]" for o in s.outputs()}} for n, s in STAGES.items()}


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Any]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(DOCKER.format(python=sys.executable))
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    pr = tmp_path / "pr"
    pr.mkdir()
    (pr / "noxfile.py").write_text(f"open({str(tmp_path / 'pwned')!r}, 'w')\n")
    env = {
        **os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "IMAGE": IMAGE,
        "SHA": SHA, "STAGEGATE": str(STAGEGATE), "DOCKER_LOG": str(tmp_path / "docker.log"),
        "PLAN": json.dumps(full_plan()),
    }  # fmt: skip
    return {"pr": pr, "work": tmp_path / "work", "env": env, "tmp": tmp_path}


def run(host: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOLS / "cpu_stage.py"), str(host["pr"]), str(host["work"])],
        env={**host["env"], **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def calls(host: dict[str, Any]) -> list[list[str]]:
    log = Path(host["env"]["DOCKER_LOG"])
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_stages_are_the_default_branchs_noxfile_commands() -> None:
    assert list(STAGES) == ["static", "execution", "integration", "performance", "slow"]
    assert STAGES["execution"].command[:3] == ("python", "-m", "pytest")
    assert "junit-unit.xml" in STAGES["execution"].outputs()
    assert STAGES["performance"].command[:5] == (
        "python", "-m", "amptrain.benchmark", "--preset", "cpu-smoke")  # fmt: skip


@pytest.mark.slow
def test_each_stage_runs_sealed_with_the_tree_read_only_and_a_fresh_folder(host: dict) -> None:
    result = run(host)
    assert result.returncode == 0, result.stderr
    runs = [c for c in calls(host) if c[0] == "run"]
    assert next(c[0] for c in calls(host)) == "pull" and len(runs) == len(STAGES)
    outs = []
    for argv in runs:
        assert argv[argv.index("--network") + 1] == "none" and "--read-only" in argv
        assert argv[argv.index("--cap-drop") + 1] == "ALL"
        assert argv[argv.index("PYTHONNOUSERSITE=1") - 1] == "--env"  # no usercustomize
        volumes = [argv[i + 1] for i, a in enumerate(argv) if a == "--volume"]
        assert volumes[0] == f"{host['pr']}:/workspace:ro" and len(volumes) == 3
        assert volumes[2] == f"{host['work'] / 'gate'}:/gate:ro"
        command = argv[argv.index(IMAGE) + 5 :]  # sh -c PREPARE STAGE COMMAND...
        gated = command[:5] == ["python", "-m", "pytest", "-p", "stagegate_gate.witness_file"]
        assert gated is (command[:3] == ["python", "-m", "pytest"]), command
        outs.append(volumes[1])
        assert argv[argv.index(IMAGE) + 1 : argv.index(IMAGE) + 2] == ["sh"]
        text = json.dumps(argv)
        for forbidden in ("docker.sock", "--privileged", "GH_TOKEN", "GITHUB_TOKEN", "nox"):
            assert forbidden not in text, forbidden
    assert len(set(outs)) == len(STAGES)  # one output folder per stage
    log = Path(f"{host['env']['DOCKER_LOG']}.seen").read_text()
    seen = [json.loads(line) for line in log.splitlines()]
    assert all(listing == [] for _, listing in seen), "a stage started with files in its folder"
    assert not (host["tmp"] / "pwned").exists(), "the commit's noxfile ran on the host"


@pytest.mark.slow
def test_the_hosts_stagegate_writes_records_the_judge_accepts(host: dict) -> None:
    assert run(host).returncode == 0
    raw = host["work"] / "reports" / "raw"
    for name, stage in STAGES.items():
        record = json.loads((raw / f"{name}.json").read_text())
        assert (record["stage"], record["commit"], record["exit_code"]) == (name, SHA, 0)
        sealed = [*stage.outputs(), *stage.beside()]  # the plugin's counts beside JUnit too
        assert sorted(record["sha256"]) == sorted(f"reports/raw/{o}" for o in sealed)
        assert record["command"][-3:] == ["--container", name, str(host["work"])]
    laid = raw_layout.lay_out(raw, host["tmp"] / "judge", list(STAGES), commit=SHA)
    assert laid == sorted(STAGES)


@pytest.mark.slow
def test_a_record_forged_by_the_container_is_never_the_record(host: dict) -> None:
    plan = full_plan()
    forged = {"kind": "stagegate-record", "stage": "execution", "exit_code": 0, "commit": SHA}
    plan["execution"]["files"]["execution.json"] = json.dumps(forged)
    plan["execution"]["exit"] = 3
    result = run(host, PLAN=json.dumps(plan))
    assert result.returncode == 3
    record = json.loads((host["work"] / "reports" / "raw" / "execution.json").read_text())
    assert record["exit_code"] == 3 and "sha256" in record  # the host's, not the forgery


@pytest.mark.slow
def test_a_link_left_in_the_output_folder_is_not_taken(host: dict) -> None:
    plan = full_plan()
    del plan["execution"]["files"]["junit-unit.xml"]
    plan["execution"]["links"] = ["junit-unit.xml"]
    run(host, PLAN=json.dumps(plan))
    raw = host["work"] / "reports" / "raw"
    assert not (raw / "junit-unit.xml").exists()
    with pytest.raises(raw_layout.LayoutError):
        raw_layout.lay_out(raw, host["tmp"] / "judge", list(STAGES), commit=SHA)


@pytest.mark.parametrize(
    ("name", "value"),
    [("IMAGE", "ghcr.io/owner/amptrain-verify:latest"), ("SHA", "main"),
     ("STAGEGATE", "/nonexistent/stagegate")],
)  # fmt: skip
def test_anything_but_a_digest_a_full_sha_and_the_hosts_stagegate_runs_nothing(
    host: dict, name: str, value: str
) -> None:
    result = run(host, **{name: value})
    assert result.returncode == 2 and name in result.stderr
    assert calls(host) == []


# ---- judge.yml runs them ----------------------------------------------------------------------

JUDGE = load_workflow("judge.yml")


def test_judge_yml_runs_the_stages_with_mains_scripts_and_the_commit_as_data() -> None:
    job = JUDGE["jobs"]["stages"]
    assert job["permissions"] == {"contents": "read"} and "environment" not in job
    checkouts = [s for s in job["steps"] if "actions/checkout@" in s.get("uses", "")]
    assert [c["with"].get("path") for c in checkouts] == ["trusted", "pr"]
    assert checkouts[0]["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    assert checkouts[1]["with"]["ref"] == "${{ needs.change.outputs.commit }}"
    scripts = "\n".join(s["run"] for s in job["steps"] if "run" in s)
    assert 'trusted/tools/ci/cpu_stage.py pr "$RUNNER_TEMP/cpu-stage"' in scripts
    for forbidden in ("docker ", "nox", "pr/", "./pr", "bash pr", "source", "pip install"):
        assert forbidden not in scripts, forbidden
    assert "secrets." not in json.dumps(job) and "id-token" not in json.dumps(job)
    judge = next(s for s in JUDGE["jobs"]["judge"]["steps"] if "judge_records" in s.get("run", ""))
    assert '--commit "$COMMIT"' in judge["run"]
    assert judge["env"]["COMMIT"] == "${{ needs.change.outputs.commit }}"


def test_the_pull_requests_own_workflow_produces_nothing_the_judge_reads() -> None:
    verify = load_workflow("verify.yml")
    text = json.dumps(verify)
    assert "upload-artifact" not in text and "checkout" not in text
    assert all(job["permissions"] == {} for job in verify["jobs"].values())
    downloads = [s for j in JUDGE["jobs"].values() for s in j["steps"]
                 if "download-artifact@" in s.get("uses", "")]  # fmt: skip
    assert all("github.event.workflow_run.id" not in json.dumps(s) for s in downloads)


@pytest.mark.slow
def test_the_gate_witness_is_the_hosts_own_and_a_change_that_blinds_its_own_still_blocks(
    tmp_path: Path,
) -> None:
    """The container loads the default branch's witness, a package of its own first on the
    path. A test module that blinds the change's copy of the witness by name and rewrites
    failures as passes gets PASS from the change's own file; the gate's witness, another
    module, saw the failure, and `stagegate report --gate-witness` holds JUnit to it alone."""
    gate = cpu_stage.gate_witness(tmp_path / "work")
    record = cpu_stage.ROOT / "stagegate" / "src" / "stagegate" / "record"  # the host's
    for name in cpu_stage.GATE_FILES:
        assert (gate / "stagegate_gate" / name).read_bytes() == (record / name).read_bytes()
    project = tmp_path / "project"
    project.mkdir()
    producers = cpu_stage.ROOT / "stagegate" / "tests" / "fixtures" / "junit" / "producers"
    tests = ["test_outcomes.py", "test_blinds_the_witness.py"]
    for name in [*tests, "test_forged_reports.py"]:  # the second imports the third
        (project / name).write_bytes((producers / name).read_bytes())
    junit = "raw/junit.xml"
    env = {**os.environ, "PYTHONPATH": str(gate)}
    command = cpu_stage.with_gate_witness(("python", "-m", "pytest"))
    assert command == ["python", "-m", "pytest", "-p", "stagegate_gate.witness_file"]
    pytest_argv = [sys.executable, *command[1:], "-p", "no:cacheprovider", f"--junitxml={junit}"]
    stage = [str(STAGEGATE), "run", "execution", "--out-dir", "raw", f"--junit={junit}", "--"]
    subprocess.run([*stage, *pytest_argv, *tests],
                   cwd=project, env=env, capture_output=True, check=True, timeout=300)  # fmt: skip
    report = [str(STAGEGATE), "report", "raw", "--only", "execution"]  # the default policy
    own = subprocess.run(report, cwd=project, capture_output=True, text=True, timeout=300)
    assert own.returncode == 0, own.stdout + own.stderr  # the change's own witness was blinded
    gated = subprocess.run([*report, "--gate-witness"], cwd=project, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert gated.returncode == 1, gated.stdout + gated.stderr
    verdict = json.loads((project / "reports" / "verdict.json").read_text())
    kinds = {f["kind"] for s in verdict["stages"] for f in s["findings"]}
    assert {"outcome_contradicted", "foreign_hooks"} <= kinds


def test_the_judge_lays_out_every_stage_the_host_runs_and_requires_all_but_the_gpus() -> None:
    """judge.yml judges what cpu_stage.py ran: each stage laid out, and each required but the
    benchmark (skippable without CUDA); a stage left unrequired would pass as NOT VERIFIED
    when its record is missing."""
    (step,) = [s for s in load_workflow("judge.yml")["jobs"]["judge"]["steps"]
               if "judge_records.py" in s.get("run", "")]  # fmt: skip
    words = step["run"].replace("\\\n", " ").split()
    laid = [words[i + 1] for i, w in enumerate(words) if w == "--stage"]
    required = [words[i + 1] for i, w in enumerate(words) if w == "--require"]
    assert laid == list(cpu_stage.STAGES)
    assert set(required) == set(cpu_stage.STAGES) - {"performance"}
