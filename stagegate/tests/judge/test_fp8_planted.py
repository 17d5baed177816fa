"""Faults planted in an fp8 arm's evidence, judged end to end by ``stagegate report``: a GPU
run (the stored H100 baseline with an fp8 arm made from its bf16 arm, 1.25x faster) passes as
it is and blocks with each plant, naming it; so does the real cpu-smoke run's emulated arm."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ..builders import FIXTURES, POLICY_FILE, copy_scenario, report_cli, reseal

H100 = FIXTURES / "benchmark-h100-80gb-hbm3.json"
RAW = Path("reports/raw")
Plant = Callable[[dict[str, Any], dict[str, Any]], None]  # (benchmark, record) -> None


def _scaled(arm: dict[str, Any], by: float) -> dict[str, Any]:
    """``arm`` as an fp8 arm whose every window took ``by`` times as long (the judge derives
    every figure from the windows: a summary the file holds is never read)."""
    fp8 = json.loads(json.dumps(arm))
    fp8["window_s"] = [w * by for w in arm["window_s"]]
    fp8.update(precision_used="fp8", fp8_layers=48, fp8_emulated=False)
    return fp8


def _gpu_run(root: Path) -> None:
    """The H100 run with its fp8 arm, and the record of the stage that wrote it."""
    doc = json.loads(H100.read_text())
    for name, result in doc["precisions"].items():
        result.setdefault("float32_matmul_precision", "high" if name == "32-tf32" else "highest")
    doc["precisions"]["fp8"] = _scaled(doc["precisions"]["bf16-mixed"], 0.8)
    doc["preset"]["precisions"].append("fp8")
    machine = doc["machine_info"]
    device = {"name": machine["gpu_name"], "driver": machine["driver"], "memory_mb": 81559,
              "compute_capability": "9.0"}  # fmt: skip
    start = datetime.fromisoformat(doc["datetime"]) - timedelta(minutes=5)
    record = json.loads((FIXTURES / "pass-cpu" / "performance.json").read_text())
    record.update(
        start=start.isoformat().replace("+00:00", "Z"), duration_s=600.0,
        commit=doc["commit_info"]["id"], command=["python", "-m", "amptrain.benchmark"],
        environment={**{k: machine[k] for k in ("python", "platform", "machine", "cpu_count")},
                     "accelerators": {"probe": "nvidia-smi", "found": True, "error": None,
                                      "devices": [device]}},
    )  # fmt: skip
    (root / RAW).mkdir(parents=True)
    (root / RAW / "benchmark.json").write_text(json.dumps(doc))
    (root / RAW / "performance.json").write_text(json.dumps(record))
    policy = POLICY_FILE.read_text().replace(
        'precisions = ["32-true", "32-tf32", "16-mixed", "bf16-mixed"]',
        'precisions = ["32-true", "32-tf32", "16-mixed", "bf16-mixed", "fp8"]',
    )
    (root / "policy.toml").write_text(policy)


def _judge(root: Path, plant: Plant | None) -> tuple[int, list[dict[str, Any]]]:
    """``stagegate report`` of the performance stage after ``plant``: exit code, findings (a
    GPU run's stage required, a CPU run's let go without CUDA, as the policy says)."""
    bench_path, record_path = root / RAW / "benchmark.json", root / RAW / "performance.json"
    doc, record = json.loads(bench_path.read_text()), json.loads(record_path.read_text())
    if plant is not None:
        plant(doc, record)
    bench_path.write_text(json.dumps(doc))
    record_path.write_text(json.dumps(record))
    reseal(root / RAW)
    policy = root / "policy.toml" if (root / "policy.toml").exists() else POLICY_FILE
    gpu = ("--require", "performance") if (root / "policy.toml").exists() else ()
    code = report_cli(root, "--only", "performance", *gpu, "--pyproject", str(policy))
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    (stage,) = verdict["stages"]
    return code, stage["findings"]


def _fp8(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["precisions"]["fp8"]


def _capability(value: str) -> Plant:
    def plant(doc: dict[str, Any], record: dict[str, Any]) -> None:
        record["environment"]["accelerators"]["devices"][0]["compute_capability"] = value

    return plant


def _a100(doc: dict[str, Any], record: dict[str, Any]) -> None:
    doc["machine_info"]["gpu_name"] = "NVIDIA A100-SXM4-80GB"
    record["environment"]["accelerators"]["devices"][0].update(
        name="NVIDIA A100-SXM4-80GB", compute_capability=None
    )


def _as_fast_as_bf16(doc: dict[str, Any], record: dict[str, Any]) -> None:
    doc["precisions"]["fp8"] = _scaled(doc["precisions"]["bf16-mixed"], 1.0)


def _beyond_its_peak(doc: dict[str, Any], record: dict[str, Any]) -> None:
    doc["precisions"]["fp8"] = _scaled(doc["precisions"]["bf16-mixed"], 0.01)


def _less_accurate(doc: dict[str, Any], record: dict[str, Any]) -> None:
    _fp8(doc)["val_accuracy"] = doc["precisions"]["bf16-mixed"]["val_accuracy"] - 0.03


GPU_PLANTS: dict[str, tuple[Plant, str, str]] = {
    # plant: (the planted fault, the finding's kind, words of its title)
    "capability 8.0": (_capability("8.0"), "evidence_impossible", "capability observed: 8.0"),
    "capability 8.6": (_capability("8.6"), "evidence_impossible", "float8 needs 8.9"),
    "an A100": (_a100, "evidence_impossible", "cannot compute in fp8"),
    "emulated": (lambda d, r: _fp8(d).update(fp8_emulated=True), "evidence_inconsistent",
                 "precisions.fp8.fp8_emulated"),
    "no layer": (lambda d, r: _fp8(d).update(fp8_layers=0), "evidence_inconsistent",
                 "precisions.fp8.fp8_layers"),
    "layers unstated": (lambda d, r: _fp8(d).pop("fp8_layers"), "evidence_missing",
                        "precisions.fp8.fp8_layers"),
    "ran as bf16": (lambda d, r: _fp8(d).update(precision_used="bf16-mixed"),
                    "evidence_inconsistent", "precisions.fp8.precision_used"),
    "no faster": (_as_fast_as_bf16, "threshold_missed", "fp8 vs bf16-mixed: speedup"),
    "beyond its peak": (_beyond_its_peak, "evidence_impossible", "dense fp8 peak"),
    "less accurate": (_less_accurate, "threshold_missed", "fp8 vs bf16-mixed: accuracy_diff"),
}  # fmt: skip


def test_the_gpu_run_with_its_fp8_arm_passes_unplanted(tmp_path: Path) -> None:
    _gpu_run(tmp_path)
    code, findings = _judge(tmp_path, None)
    assert (code, findings) == (0, [])


@pytest.mark.parametrize("name", sorted(GPU_PLANTS))
def test_each_fault_planted_in_the_gpu_run_blocks_naming_it(tmp_path: Path, name: str) -> None:
    plant, kind, words = GPU_PLANTS[name]
    _gpu_run(tmp_path)
    code, findings = _judge(tmp_path, plant)
    assert code == 1
    assert any(f["kind"] == kind and words in f["title"] for f in findings), findings


CPU_PLANTS: dict[str, tuple[Plant, str, str]] = {
    "not emulated": (lambda d, r: _fp8(d).update(fp8_emulated=False), "evidence_impossible",
                     "none: no GPU"),
    "less accurate": (_less_accurate, "threshold_missed", "fp8 vs bf16-mixed: accuracy_diff"),
    "no layer": (lambda d, r: _fp8(d).update(fp8_layers=0), "evidence_inconsistent",
                 "precisions.fp8.fp8_layers"),
}  # fmt: skip


@pytest.mark.parametrize("name", [None, *sorted(CPU_PLANTS)])
def test_each_fault_planted_in_the_real_cpu_smoke_run_blocks_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str | None
) -> None:
    copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    plant, kind, words = CPU_PLANTS[name] if name else (None, "", "")
    code, findings = _judge(tmp_path, plant)
    if plant is None:
        assert (code, findings) == (0, [])
        return
    assert code == 1
    assert any(f["kind"] == kind and words in f["title"] for f in findings), findings
