"""The benchmark part of the policy: what each preset must hold, each GPU's peak figures, the
tolerances; bad values are refused naming their key, and evidence findings always block."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stagegate.benchpolicy import DEFAULT_PEAK_TFLOPS, BenchmarkPolicy, PresetSpec
from stagegate.errors import ConfigError
from stagegate.policy import EVIDENCE_KINDS, Policy, load_policy, policy_from_mapping

GPU = {
    "device": "cuda",
    "precisions": ["32-true", "bf16-mixed"],
    "measures": ["speed", "memory", "accuracy"],
}
PEAKS = {"fp32": 10.0, "tf32": 20.0, "fp16": 40.0, "bf16": 40.0}


def bench_policy(**table: Any) -> BenchmarkPolicy:
    return policy_from_mapping({"benchmark": table}).benchmark


def test_this_repositorys_policy_declares_the_defaults(policy_file: Path) -> None:
    assert load_policy(policy_file).benchmark == BenchmarkPolicy() == Policy().benchmark


def test_the_defaults_bound_an_h100s_bf16_speedup_at_its_datasheet_ratio() -> None:
    h100 = DEFAULT_PEAK_TFLOPS["H100"]
    assert h100["bf16"] / h100["fp32"] == pytest.approx(1979 / 2 / 67)  # 989.5* / 67: 14.8x


def test_a_table_given_replaces_its_default_whole() -> None:
    p = bench_policy(presets={"mine": GPU}, peak_tflops={"X9": PEAKS}, min_windows=7)
    assert p.presets == {
        "mine": PresetSpec("cuda", ("32-true", "bf16-mixed"), ("speed", "memory", "accuracy"))
    }
    assert p.peak_tflops == {"X9": PEAKS} and p.min_windows == 7
    assert p.max_windows == BenchmarkPolicy().max_windows  # what it does not name stays


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"budget": 3}, "budget"),
        ({"presets": []}, "presets"),
        ({"presets": {"p": {**GPU, "device": "tpu"}}}, "presets.p.device"),
        ({"presets": {"p": {**GPU, "precisions": []}}}, "presets.p.precisions"),
        ({"presets": {"p": {**GPU, "measures": ["speed", "accuracy"]}}}, "presets.p.measures"),
        ({"presets": {"p": {**GPU, "device": "cpu"}}}, "presets.p.measures"),
        (
            {"presets": {"p": {**GPU, "measures": ["speed", "memory", "accuracy", "luck"]}}},
            "presets.p.measures",
        ),
        ({"presets": {"p": {"device": "cuda"}}}, "presets.p"),
        ({"peak_tflops": {"X9": {**PEAKS, "fp32": 0}}}, "peak_tflops.X9.fp32"),
        ({"peak_tflops": {"X9": {**PEAKS, "bf16": "fast"}}}, "peak_tflops.X9.bf16"),
        ({"peak_tflops": {"X9": {"fp32": 10.0}}}, "peak_tflops.X9"),
        ({"peak_tflops": {" ": PEAKS}}, "peak_tflops. "),
        ({"min_windows": 1}, "min_windows"),
        ({"min_windows": 5.5}, "min_windows"),
        ({"max_windows": 10_000}, "max_windows"),
        ({"min_windows": 20, "max_windows": 10}, "min_windows"),
        ({"summary_tolerance_pct": 0}, "summary_tolerance_pct"),
        ({"summary_tolerance_pct": True}, "summary_tolerance_pct"),
        ({"interval_tolerance": 0.025}, "interval_tolerance"),
        ({"interval_tolerance": -0.01}, "interval_tolerance"),
    ],
)
def test_a_bad_benchmark_value_names_its_key(table: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=f"benchmark.{key}"):
        bench_policy(**table)


def test_the_benchmark_key_needs_a_table() -> None:
    with pytest.raises(ConfigError, match="benchmark"):
        policy_from_mapping({"benchmark": 3})


@pytest.mark.parametrize("kind", EVIDENCE_KINDS)
@pytest.mark.parametrize("severity", ["MEDIUM", "LOW", "INFO"])
def test_evidence_findings_can_never_be_made_to_pass(kind: str, severity: str) -> None:
    with pytest.raises(ConfigError, match=kind):
        policy_from_mapping({"severity": {kind: severity}})
    assert policy_from_mapping({"severity": {kind: "HIGH"}}).severity[kind].blocks
