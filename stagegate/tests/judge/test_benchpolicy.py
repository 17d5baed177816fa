"""The benchmark part of the policy: what each preset must hold, each GPU's peak figures, the
tolerances; bad values are refused naming their key, and evidence findings always block."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stagegate.errors import ConfigError
from stagegate.judge.benchpolicy import DEFAULT_PEAK_TFLOPS, BenchmarkPolicy, PresetSpec
from stagegate.judge.policy import Policy, load_policy, policy_from_mapping
from stagegate.kinds import CATALOGUE
from stagegate.model import Severity

# The kinds that are evidence: a policy may not make them pass
EVIDENCE_KINDS = [str(k) for k, a in CATALOGUE.items() if a.floor is Severity.HIGH]

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
    ("table", "key", "need"),
    [
        ({"budget": 3}, "budget", "unknown key"),
        ({"presets": []}, "presets", "a table of presets"),
        ({"presets": {}}, "presets", "a table of presets"),
        ({"presets": {"p": {**GPU, "device": "tpu"}}}, "presets.p.device", "cuda or cpu"),
        ({"presets": {"p": {**GPU, "precisions": []}}}, "presets.p.precisions", "a list of names"),
        ({"presets": {"p": {**GPU, "precisions": [3]}}}, "presets.p.precisions", "a list of names"),
        ({"presets": {"p": {**GPU, "precisions": [""]}}}, "presets.p.precisions", "a list of"),
        (
            {"presets": {"p": {**GPU, "measures": ["speed", "accuracy"]}}},
            "presets.p.measures",
            "a cuda preset measures speed, accuracy, memory",
        ),
        (
            {"presets": {"p": {**GPU, "device": "cpu"}}},
            "presets.p.measures",
            "a cpu preset measures speed, accuracy and never memory",
        ),
        (
            {"presets": {"p": {**GPU, "measures": ["speed", "memory", "accuracy", "luck"]}}},
            "presets.p.measures",
            "a list from speed, memory, accuracy, syncs",
        ),
        ({"presets": {"p": {"device": "cuda"}}}, "presets.p", "write { device"),
        ({"presets": {"p": {**GPU, "batch_size": 0}}}, "presets.p.batch_size", "a whole number"),
        ({"presets": {"p": {**GPU, "seq_len": 2.5}}}, "presets.p.seq_len", "a whole number"),
        ({"presets": {"p": {**GPU, "windows": True}}}, "presets.p.windows", "a finite number"),
        ({"presets": {"p": {**GPU, "ab_window_steps": 0}}}, "presets.p.ab_window_steps", "whole"),
        ({"presets": {"p": {**GPU, "batch": 8}}}, "presets.p", "the sizes windows"),
        ({"presets": {"p": "gpu"}}, "presets.p", "write { device"),
        ({"peak_tflops": []}, "peak_tflops", "a table of GPU name patterns"),
        ({"peak_tflops": {"X9": {**PEAKS, "fp32": 0}}}, "peak_tflops.X9.fp32", "a number above 0"),
        (
            {"peak_tflops": {"X9": {**PEAKS, "bf16": "fast"}}},
            "peak_tflops.X9.bf16",
            "a finite number",
        ),
        (
            {"peak_tflops": {"X9": {"fp32": 10.0}}},
            "peak_tflops.X9",
            "a table of fp32, tf32, fp16, bf16",
        ),
        ({"peak_tflops": {" ": PEAKS}}, "peak_tflops. ", "a table of fp32"),
        ({"peak_tflops": {"X9": 3}}, "peak_tflops.X9", "a table of fp32"),
        ({"min_windows": 1}, "min_windows", "a whole number above 1 and below 501"),
        ({"min_windows": 5.5}, "min_windows", "a whole number"),
        ({"max_windows": 501}, "max_windows", "a whole number above 1 and below 501"),
        ({"min_windows": 20, "max_windows": 10}, "min_windows", "must not exceed max_windows"),
        # a file's summaries are never read: no tolerance for them is a key any more
        ({"summary_tolerance_pct": 0.1}, "summary_tolerance_pct", "unknown key"),
        ({"interval_tolerance": 0.02}, "interval_tolerance", "unknown key"),
        ({"clock_tolerance_s": 600}, "clock_tolerance_s", "a number above 0 and below 600"),
    ],
)
def test_a_bad_benchmark_value_names_its_key_and_what_it_needs(
    table: dict, key: str, need: str
) -> None:
    """The message names the key, shows the value given, and says what it must be."""
    with pytest.raises(ConfigError) as caught:
        bench_policy(**table)
    message = str(caught.value)
    assert f"[tool.stagegate] benchmark.{key}" in message and need in message
    if need != "unknown key":  # the value given follows the key (no case gives None)
        assert message.split(f"benchmark.{key} = ", 1)[1].split(":")[0] != "None"


def test_the_limits_themselves_are_allowed() -> None:
    p = bench_policy(
        min_windows=2,
        max_windows=2,
        clock_tolerance_s=599.9,
        peak_tflops={"X9": {**PEAKS, "fp32": 0.5}},
        presets={
            "cpu": {
                "device": "cpu",
                "precisions": ["32-true", "32-true"],
                "measures": ["speed", "accuracy"],
            }
        },
    )
    assert (p.min_windows, p.max_windows) == (2, 2) and isinstance(p.min_windows, int)
    assert p.peak_tflops["X9"]["fp32"] == 0.5 and p.clock_tolerance_s == 599.9
    assert p.presets["cpu"].precisions == ("32-true",)  # named twice, measured once
    assert p.presets["cpu"].sizes == {}  # no size declared: the file's own are used
    sized = bench_policy(presets={"p": {**GPU, "window_steps": 10, "batch_size": 32}})
    assert sized.presets["p"].sizes == {"window_steps": 10, "batch_size": 32}
    assert sized.presets["p"].ab_window_steps is None
    ab = bench_policy(presets={"p": {**GPU, "ab_window_steps": 1}}).presets["p"]
    assert (ab.ab_window_steps, ab.sizes) == (1, {})
    assert bench_policy(max_windows=500).max_windows == 500


def test_the_benchmark_key_needs_a_table() -> None:
    with pytest.raises(ConfigError, match=r"benchmark = 3: a table is needed"):
        policy_from_mapping({"benchmark": 3})


@pytest.mark.parametrize("kind", EVIDENCE_KINDS)
@pytest.mark.parametrize("severity", ["MEDIUM", "LOW", "INFO"])
def test_evidence_findings_can_never_be_made_to_pass(kind: str, severity: str) -> None:
    with pytest.raises(ConfigError, match=kind):
        policy_from_mapping({"severity": {kind: severity}})
    assert policy_from_mapping({"severity": {kind: "HIGH"}}).severity[kind].blocks
