"""The committed GPU baselines: each one is a whole benchmark of the gpu preset on a named GPU,
from a clean commit, that the gate can read and compare with, and that holds the preset's
promise (a bf16-vs-fp32 speedup interval no wider than 3% either side)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from amptrain.benchmark.presets import PRESETS
from amptrain.benchmark.run import preset_model
from stagegate.collect.benchmark import read_benchmark
from stagegate.judge import judge_stage
from stagegate.judge.baseline import compare_to_baseline
from stagegate.judge.benchpolicy import SIZES
from stagegate.judge.derive import figured, speedup
from stagegate.judge.policy import Policy, load_policy
from stagegate.model import StageData, StageRecord, StageStatus

ROOT = Path(__file__).resolve().parents[2]
BASELINES = ROOT / "reports" / "baseline"
POLICY = load_policy(ROOT / "pyproject.toml")
# stagegate's own tests judge this copy (they read nothing outside stagegate/)
GATE_COPY = (
    ROOT / "stagegate" / "tests" / "fixtures" / "stagegate" / "benchmark-h100-80gb-hbm3.json"
)
SCHEMA = json.loads(
    resources.files("amptrain.benchmark").joinpath("benchmark.schema.json").read_text()
)
FILES = sorted(BASELINES.glob("*.json"))


def _preset_as_measured(doc: dict) -> dict:
    """The gpu preset as ``doc`` ran it: a baseline measured before the preset's fp8 arm holds
    every other arm (no GPU has measured fp8 yet: the gate requires it of every new run)."""
    preset = PRESETS["gpu"].to_dict()
    if "fp8" not in doc["precisions"]:
        preset["precisions"] = [p for p in preset["precisions"] if p != "fp8"]
        preset.pop("fp8_emulate")
    return preset


def _policy_as_measured(doc: dict) -> Policy:
    """The repository's policy, its gpu preset as ``doc`` ran it (see _preset_as_measured)."""
    gpu = POLICY.benchmark.presets["gpu"]
    ran = replace(gpu, precisions=tuple(_preset_as_measured(doc)["precisions"]))
    presets = {**POLICY.benchmark.presets, "gpu": ran}
    return replace(POLICY, benchmark=replace(POLICY.benchmark, presets=presets))


def test_there_is_a_baseline() -> None:
    assert FILES, f"no benchmark JSON in {BASELINES}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_a_baseline_is_a_clean_gpu_run_of_the_gpu_preset(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.validate(doc, SCHEMA)
    machine = doc["machine_info"]
    for key in ("gpu_name", "driver", "torch", "cuda"):
        assert machine[key], f"{path.name} does not name its {key}"
    assert doc["gpu_verified"] and doc["device"] == "cuda"
    assert doc["preset"] == _preset_as_measured(doc), "measured with another gpu preset"
    # A run without git (the GPU job's container, a lent machine's copy of the tree) names the
    # commit it was given and cannot tell whether the tree was clean (dirty null); with git, the
    # tree must have been clean.
    assert doc["commit_info"]["id"] and doc["commit_info"]["dirty"] is not True
    assert all(r["status"] == "ok" for r in doc["precisions"].values())
    assert set(doc["precisions"]) == set(_preset_as_measured(doc)["precisions"])
    slug = machine["gpu_name"].removeprefix("NVIDIA ").lower().replace(" ", "-")
    assert path.name == f"benchmark-{slug}.json"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_the_gate_reads_a_baseline_and_finds_it_comparable_with_itself(path: Path) -> None:
    bench = figured(read_benchmark(path), POLICY.benchmark)
    cmp = compare_to_baseline(bench, bench, margin_pct=10.0)
    assert cmp.comparable and not cmp.regressions and cmp.changes
    windows = {p.name: p.window_s for p in bench.precisions}
    ratio, (low, high) = speedup(windows["32-true"], windows["bf16-mixed"])
    assert (high - low) / 2 <= 0.03 * ratio


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_a_baseline_is_sound_evidence_that_the_gate_passes_as_a_gpu_run(
    path: Path, tmp_path: Path
) -> None:
    """Judged as the stage run that wrote it (its commit, around its time, on its machine). A
    baseline measured before the benchmark wrote float32_matmul_precision gets it as every
    commit has set it: TF32 ("high") for 32-tf32 alone."""
    doc = json.loads(path.read_text())
    for name, result in doc["precisions"].items():
        result.setdefault("float32_matmul_precision", "high" if name == "32-tf32" else "highest")
    (tmp_path / path.name).write_text(json.dumps(doc))
    written = datetime.fromisoformat(doc["datetime"]) - timedelta(minutes=5)
    machine = doc["machine_info"]
    seen = {"name": machine["gpu_name"], "driver": machine["driver"], "memory_mb": 0}
    record = StageRecord(
        stage="performance",
        command=["x"],
        exit_code=0,
        start=written.isoformat(),
        duration_s=600,
        commit=doc["commit_info"]["id"],
        files={"benchmark": str(tmp_path / path.name)},  # the file the policy requires
        environment={  # as stagegate run observed the machine that measured it
            **{k: machine[k] for k in ("python", "platform", "machine", "cpu_count")},
            "accelerators": {"probe": "nvidia-smi", "found": True, "devices": [seen]},
        },
    )
    data = StageData(record, benchmark=read_benchmark(tmp_path / path.name))
    stage = judge_stage("performance", data, _policy_as_measured(doc))
    assert stage.status is StageStatus.PASS and stage.findings == (), stage.findings
    if "fp8" not in doc["precisions"]:  # the repository's policy requires the fp8 arm now
        blocked = judge_stage("performance", data, POLICY)
        assert [f.title for f in blocked.findings] == [
            "benchmark precisions.fp8: absent; preset gpu measures 32-true, 32-tf32, 16-mixed, "
            "bf16-mixed, fp8"
        ]


def test_stagegates_copy_of_the_h100_baseline_is_the_committed_one() -> None:
    assert GATE_COPY.read_bytes() == (BASELINES / GATE_COPY.name).read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_the_policy_declares_each_preset_as_the_benchmark_runs_it(name: str) -> None:
    """What the gate requires of a preset's file is what the benchmark writes for it."""
    declared = POLICY.benchmark.presets[name]
    assert declared.precisions == PRESETS[name].precisions
    model = preset_model(PRESETS[name])
    assert declared.flops_per_token == model.flops_per_token(PRESETS[name].seq_len)
    assert declared.device == ("cuda" if PRESETS[name].needs_cuda else "cpu")
    assert declared.sizes == {k: getattr(PRESETS[name], k) for k in SIZES}
    assert ("memory" in declared.measures) == PRESETS[name].needs_cuda
