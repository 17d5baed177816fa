"""tools/ci/gpu_stage.sh, the only script gpu.yml runs on the GPU host, against a commit whose
Dockerfile, image script and noxfile would each leave a mark if anything ran them.

There is no Docker engine and no GPU here, so `docker` and `nvidia-smi` are stand-ins on PATH
that log every call, and a folder stands in for the kernel driver's /proc/driver/nvidia/gpus
(the one thing of stagegate the test replaces); the stand-in container writes what a real
benchmark writes (the committed H100 result, for the commit it is given and at the time it runs)
into the folder mounted at /out. The default branch's stagegate records the stage for real, and
the trusted judge then judges the artifact for real.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .ci_tools import ROOT, TOOLS, stagegate_for_judge, tool

raw_layout = tool("raw_layout")

SHA = "a" * 40
IMAGE = "ghcr.io/owner/amptrain-verify@sha256:" + "e" * 64
H100 = ROOT / "reports" / "baseline" / "benchmark-h100-80gb-hbm3.json"
AB = ROOT / "stagegate" / "tests" / "fixtures" / "stagegate" / "ab-cpu-self.json"
ALLOWED_ENV = {"HOME", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "WANDB_MODE", "GITHUB_SHA"}

DOCKER = """#!{python}
import json, os, platform, sys, time
args = sys.argv[1:]
with open(os.environ["DOCKER_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[:1] == ["run"]:
    out = next(v.split(":")[0] for v in args if v.endswith(":/out:rw"))
    mode = os.environ.get("CONTAINER", "benchmark")
    if "pytest" in args and mode != "none":
        with open(out + "/junit-cuda.xml", "w") as dst:
            dst.write(os.environ["JUNIT_CUDA"])
        witness = '"raised": [], "deselected": [], "skipped_by": []'
        gate = os.environ.get("GATE_WITNESS") != "absent"
        for name in ("counts", "witness")[: 1 + gate]:  # stagegate's plugin's, and the gate's
            with open(out + "/junit-cuda.xml." + name + ".json", "w") as dst:
                dst.write('{{"format_version": 4, "subtest_reports": 0, ' + witness + '}}')
    elif "amptrain.benchmark.ab" in args:
        with open(os.environ["AB"]) as src, open(out + "/ab.json", "w") as dst:
            dst.write(src.read())
    elif mode == "benchmark":  # written now, for the commit the job gave the container
        with open(os.environ["BENCHMARK"]) as src:
            doc = json.load(src)
        given = dict(v.split("=", 1) for v in args if v.startswith("GITHUB_SHA="))
        doc["commit_info"]["id"] = given.get("GITHUB_SHA")
        doc["datetime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # a container on this host sees the host's CPUs and architecture
        doc["machine_info"].update(cpu_count=os.cpu_count(), machine=platform.machine())
        for name, result in doc["precisions"].items():
            result["float32_matmul_precision"] = "high" if name == "32-tf32" else "highest"
        with open(out + "/benchmark.json", "w") as dst:
            json.dump(doc, dst)
    elif mode == "replay":  # a stored result, copied as it is
        with open(os.environ["BENCHMARK"]) as src, open(out + "/benchmark.json", "w") as dst:
            dst.write(src.read())
    elif mode == "link":
        os.symlink("/etc/passwd", out + "/benchmark.json")
    sys.exit(int(os.environ.get("CONTAINER_EXIT", "0")))
"""
JUNIT = (
    '<testsuites><testsuite name="pytest" tests="1" failures="0" errors="0" skipped="0">'
    '<testcase classname="tests.amptrain.test_engine" name="test_fp16_scaler_on_cuda" '
    'file="tests/amptrain/test_engine.py" time="0.5"/></testsuite></testsuites>'
)
# The host's GPU, as nvidia-smi answers gpu_stage.sh's query (name, driver) and stagegate
# run's (name, driver, memory, compute capability)
NVIDIA_SMI = """#!/bin/sh
case "$1" in
    *compute_cap*) echo 'NVIDIA H100 80GB HBM3, 580.159.04, 81559, 9.0' ;;
    *) echo 'NVIDIA H100 80GB HBM3, 580.159.04' ;;
esac
"""


# stagegate itself, with the host's kernel driver listing the H100 in the folder given
STAGEGATE_ON_H100 = """#!{python}
import sys
from pathlib import Path

from stagegate.record import machine

machine.KERNEL = machine.Kernel(gpus=Path({proc!r}))
from stagegate.cli import main

sys.exit(main())
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def host(tmp_path: Path) -> dict:
    """The stand-ins, a hostile commit tree and the environment gpu.yml gives the script."""
    bin_dir, marker = tmp_path / "bin", tmp_path / "pwned"
    bin_dir.mkdir()
    _executable(bin_dir / "docker", DOCKER.format(python=sys.executable))
    _executable(bin_dir / "nvidia-smi", NVIDIA_SMI)
    info = tmp_path / "proc-gpus" / "0000:00:06.0" / "information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA H100 80GB HBM3\nBus Type: \t PCIe\n")
    stagegate = bin_dir / "stagegate-on-h100"
    _executable(
        stagegate, STAGEGATE_ON_H100.format(python=sys.executable, proc=str(info.parent.parent))
    )
    pr = tmp_path / "pr"
    (pr / "tools" / "ci").mkdir(parents=True)
    (pr / "Dockerfile").write_text(f"FROM scratch\nRUN touch {marker}\n")
    _executable(pr / "tools" / "ci" / "image.sh", f"#!/bin/sh\ntouch {marker}\n")
    (pr / "noxfile.py").write_text(f"open({str(marker)!r}, 'w')\n")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "IMAGE": IMAGE,
        "SHA": SHA,
        "STAGEGATE": str(stagegate),
        "DOCKER_LOG": str(tmp_path / "docker.log"),
        "BENCHMARK": str(H100),
        "AB": str(AB),
        "JUNIT_CUDA": JUNIT,
        "GITHUB_RUN_ID": "77",
    }
    return {"pr": pr, "work": tmp_path / "work", "marker": marker, "env": env, "tmp": tmp_path}


def stage(host: dict, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(TOOLS / "gpu_stage.sh"), str(host["pr"]), str(host["work"])],
        env={**host["env"], **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def docker_calls(host: dict) -> list[list[str]]:
    log = Path(host["env"]["DOCKER_LOG"])
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.slow
def test_the_commit_runs_only_in_the_pinned_image_without_network_socket_or_secrets(
    host: dict,
) -> None:
    result = stage(host)
    assert result.returncode == 0, result.stderr
    calls = docker_calls(host)
    assert [c[0] for c in calls] == ["pull", "run", "rm", "run", "rm"]
    cuda = calls[3]
    assert cuda[cuda.index(IMAGE) + 1 :][:7] == [
        "python",
        "-m",
        "pytest",
        "-p",
        "stagegate.pytest_plugin",
        "-p",
        "stagegate_gate.witness_file",
    ]
    assert f"{host['work']}/gate:/gate:ro" in cuda  # the default branch's witness, read-only
    assert (host["work"] / "gate" / "stagegate_gate" / "witness_file.py").is_file()
    assert cuda[cuda.index("--network") + 1] == "none" and f"{host['pr']}:/workspace:ro" in cuda
    assert cuda[cuda.index("-m", cuda.index("pytest")) + 1] == "cuda"  # the cuda-marked tests
    assert calls[0][-1] == IMAGE
    run = calls[1]
    assert IMAGE in run and run[run.index(IMAGE) + 1 :][:3] == [
        "python",
        "-m",
        "amptrain.benchmark",
    ]
    assert {"--rm", "--read-only"} <= set(run)
    assert run[run.index("--network") + 1] == "none" and run[run.index("--cap-drop") + 1] == "ALL"
    assert run[run.index("--security-opt") + 1] == "no-new-privileges"
    volumes = [run[i + 1] for i, a in enumerate(run) if a == "--volume"]
    assert volumes == [f"{host['pr']}:/workspace:ro", f"{host['work']}/container-out:/out:rw"]
    env_names = {run[i + 1].split("=")[0] for i, a in enumerate(run) if a == "--env"}
    assert env_names <= ALLOWED_ENV
    text = json.dumps(calls)
    for forbidden in ("docker.sock", "--privileged", "build", "GH_TOKEN", "GITHUB_TOKEN"):
        assert forbidden not in text, forbidden
    assert not host["marker"].exists(), "a script of the commit ran on the host"


@pytest.mark.slow
def test_the_host_records_the_stage_with_paths_the_judge_accepts(host: dict) -> None:
    assert stage(host).returncode == 0
    raw = host["work"] / "reports" / "raw"
    record = json.loads((raw / "performance.json").read_text())
    assert (record["stage"], record["exit_code"], record["commit"]) == ("performance", 0, SHA)
    assert record["files"] == {"benchmark": "reports/raw/benchmark.json"}
    written, stored = json.loads((raw / "benchmark.json").read_text()), json.loads(H100.read_text())
    assert written["commit_info"]["id"] == SHA
    for name, result in written["precisions"].items():  # the stand-in adds what run.py writes
        assert result.pop("float32_matmul_precision") == (
            "high" if name == "32-tf32" else "highest"
        )
    assert written["precisions"] == stored["precisions"]
    facts = json.loads((host["work"] / "host.json").read_text())
    assert (facts["sha"], facts["image"], facts["gpu_name"], facts["driver"]) == (
        SHA, IMAGE, "NVIDIA H100 80GB HBM3", "580.159.04")  # fmt: skip
    cuda = json.loads((raw / "cuda.json").read_text())
    assert cuda["files"] == {"junit": "reports/raw/junit-cuda.xml"} and cuda["commit"] == SHA
    laid = raw_layout.lay_out(raw, host["tmp"] / "judge" / "reports" / "raw",
                              ["performance", "cuda"], commit=SHA)  # fmt: skip
    assert sorted(laid) == ["cuda", "performance"]


@pytest.mark.slow
def test_a_link_left_by_the_container_is_not_taken(host: dict) -> None:
    assert stage(host, CONTAINER="link").returncode == 0
    raw = host["work"] / "reports" / "raw"
    assert not (raw / "benchmark.json").exists()
    with pytest.raises(raw_layout.LayoutError, match="not in the artifact"):
        raw_layout.lay_out(raw, host["tmp"] / "raw", ["performance", "cuda"], commit=SHA)


@pytest.mark.slow
def test_a_failed_benchmark_is_recorded_and_the_host_facts_still_written(host: dict) -> None:
    result = stage(host, CONTAINER="none", CONTAINER_EXIT="3")
    assert result.returncode == 3
    record = json.loads((host["work"] / "reports" / "raw" / "performance.json").read_text())
    assert record["exit_code"] == 3
    assert (host["work"] / "host.json").exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("IMAGE", "ghcr.io/owner/amptrain-verify:latest"),
        ("IMAGE", "amptrain-verify:local-0123456789abcdef"),
        ("SHA", "main"),
        ("STAGEGATE", "/nonexistent/stagegate"),
    ],
)
def test_anything_but_a_digest_a_full_sha_and_the_host_stagegate_is_refused(
    host: dict, name: str, value: str
) -> None:
    result = stage(host, **{name: value})
    assert result.returncode == 2 and name in result.stderr
    assert docker_calls(host) == [], "docker ran before the inputs were checked"


def judge_gpu(host: dict, artifact: Path) -> dict[str, str]:
    """judge_records.py as gpu.yml's status job runs it (baseline: none accepted)."""
    tmp = host["tmp"]
    command, _, env = stagegate_for_judge(tmp)
    (tmp / "changed.txt").write_text("src/amptrain/loop.py\n")
    shutil.copyfile(host["work"] / "host.json", tmp / "host.json")
    outputs = tmp / "outputs"
    args = [
        "--artifact", str(artifact), "--work", str(tmp / "gpu-judge"), "--base", str(ROOT),
        "--out", str(tmp / "gpu-reports"), "--changed-files", str(tmp / "changed.txt"),
        "--stage", "performance", "--stage", "cuda", "--commit", SHA,
        "--host", str(tmp / "host.json"), "--image", IMAGE,
        "--note", "regression NOT VERIFIED: no accepted baseline",
        "--", "--only", "performance", "--only", "cuda", "--require", "performance",
        "--require", "cuda", "--gate-witness",
    ]  # fmt: skip
    run = subprocess.run(
        [sys.executable, str(TOOLS / "judge_records.py"), *args],
        env={**os.environ, **env, "STAGEGATE": command, "GITHUB_OUTPUT": str(outputs)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return dict(line.split("=", 1) for line in outputs.read_text().splitlines())


@pytest.mark.slow
def test_the_gpu_judge_holds_a_real_h100_result_to_the_gpu_preset_and_regression_unverified(
    host: dict,
) -> None:
    """The stored H100 run predates the preset's fp8 arm, and the stand-in container writes in
    an instant what took 74 s of timed windows: those two are all that block it (no GPU has
    measured fp8 yet; the GPU job's next run measures it)."""
    assert stage(host).returncode == 0
    out = judge_gpu(host, host["work"] / "reports" / "raw")
    assert out["state"] == "failure", out
    assert "regression NOT VERIFIED" in out["description"]
    verdict = json.loads((host["tmp"] / "gpu-reports" / "verdict.json").read_text())
    reasons = verdict["blocking_reasons"]
    timed = "CRITICAL in performance: the benchmark file times 76.6 s of windows and steps in a "
    assert reasons[1].startswith(timed), reasons
    assert reasons[:1] + reasons[2:] == [
        "required stage performance is FAIL",
        "CRITICAL in performance: benchmark precisions.fp8: absent; preset gpu measures "
        "32-true, 32-tf32, 16-mixed, bf16-mixed, fp8",
    ]


@pytest.mark.slow
def test_the_gpu_judge_blocks_a_cpu_result_claimed_for_the_gpu_stage(host: dict) -> None:
    smoke = ROOT / "stagegate" / "tests" / "fixtures" / "stagegate" / "pass-cpu" / "benchmark.json"
    assert stage(host, BENCHMARK=str(smoke)).returncode == 0
    assert judge_gpu(host, host["work"] / "reports" / "raw")["state"] == "failure"


@pytest.mark.slow
def test_the_gpu_judge_blocks_a_stored_result_replayed_by_the_container(host: dict) -> None:
    assert stage(host, CONTAINER="replay").returncode == 0
    out = judge_gpu(host, host["work"] / "reports" / "raw")
    assert out["state"] == "failure", out


@pytest.mark.slow
def test_the_gpu_judge_blocks_a_result_for_another_gpu_than_the_hosts(host: dict) -> None:
    assert stage(host).returncode == 0
    facts = json.loads((host["work"] / "host.json").read_text())
    facts["gpu_name"] = "NVIDIA A100-SXM4-80GB"
    (host["work"] / "host.json").write_text(json.dumps(facts))
    assert judge_gpu(host, host["work"] / "reports" / "raw")["state"] == "failure"


@pytest.mark.slow
def test_the_gpu_judge_refuses_a_run_in_another_image(host: dict) -> None:
    assert stage(host).returncode == 0
    facts = json.loads((host["work"] / "host.json").read_text())
    facts["image"] = "ghcr.io/owner/amptrain-verify@sha256:" + "f" * 64
    (host["work"] / "host.json").write_text(json.dumps(facts))
    out = judge_gpu(host, host["work"] / "reports" / "raw")
    assert out["state"] == "error" and "host.json" in out["description"]


@pytest.mark.slow
def test_with_a_base_the_a_b_runs_in_the_image_with_both_trees_read_only(host: dict) -> None:
    base = host["tmp"] / "base"
    (base / "src").mkdir(parents=True)
    result = stage(host, BASE_SHA="b" * 40, BASE_TREE=str(base))
    assert result.returncode == 0, result.stderr
    runs = [c for c in docker_calls(host) if c[0] == "run"]
    assert len(runs) == 3 and not host["marker"].exists()
    ab = runs[2]
    assert ab[ab.index(IMAGE) + 1 :][:3] == ["python", "-m", "amptrain.benchmark.ab"]
    assert f"{base}:/base:ro" in ab and f"{host['pr']}:/workspace:ro" in ab
    assert ab[ab.index("--base-sha") + 1] == "b" * 40 and ab[ab.index("--head-sha") + 1] == SHA
    assert ab[ab.index("--network") + 1] == "none" and "PYTHONPATH=/base/src" in ab
    raw = host["work"] / "reports" / "raw"
    record = json.loads((raw / "regression.json").read_text())
    assert record["files"] == {"ab": "reports/raw/ab.json"} and (raw / "ab.json").is_file()


def test_a_malformed_base_sha_runs_nothing(host: dict) -> None:
    result = stage(host, BASE_SHA="main", BASE_TREE=str(host["tmp"]))
    assert result.returncode == 2 and "BASE_SHA" in result.stderr
    assert docker_calls(host) == []


@pytest.mark.slow
def test_the_gpu_judge_blocks_when_the_cuda_tests_left_no_junit(host: dict) -> None:
    assert stage(host).returncode == 0
    (host["work"] / "reports" / "raw" / "junit-cuda.xml").unlink()
    assert judge_gpu(host, host["work"] / "reports" / "raw")["state"] != "success"


@pytest.mark.slow
def test_the_gpu_judge_blocks_cuda_tests_the_gates_witness_did_not_see(host: dict) -> None:
    """The commit's own plugin wrote its file; the default branch's witness wrote none (the
    commit kept it from loading): the cuda stage's outcomes are claims, and the check fails."""
    assert stage(host, GATE_WITNESS="absent").returncode == 0
    raw = host["work"] / "reports" / "raw"
    assert (raw / "junit-cuda.xml.counts.json").is_file()
    assert judge_gpu(host, raw)["state"] == "failure"
    verdict = json.loads((host["tmp"] / "gpu-reports" / "verdict.json").read_text())
    (cuda,) = [s for s in verdict["stages"] if s["name"] == "cuda"]
    assert [f["severity"] for f in cuda["findings"] if f["kind"] == "outcomes_unwitnessed"] == [
        "HIGH"
    ]
