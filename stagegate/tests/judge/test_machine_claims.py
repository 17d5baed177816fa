"""The machine and the clock are observed, not believed: a stage's output that claims a machine
the record did not see, a record without stagegate run's own observation, and a record or file
dated after the report's clock each BLOCK with their own finding."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stagegate.collect.files import read_coverage
from stagegate.collect.junit import read_junit
from stagegate.judge import decide, judge_stage
from stagegate.judge.findings import Findings
from stagegate.judge.machine import (
    claim_findings,
    device_memory_mb,
    junit_clock_findings,
    machine_findings,
    record_findings,
)
from stagegate.judge.policy import Policy
from stagegate.model import Decision, MachineClaim, Severity, StageData, TestSuite

from ..builders import (
    CPU_MACHINE,
    FIXTURES,
    case,
    copy_scenario,
    gpu_machine,
    record,
    report_cli,
    reseal,
    suite,
)

H100 = "NVIDIA H100 80GB HBM3"
NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


def _kinds(f: Findings) -> list[str]:
    return [x.kind for x in f.items]


def _seen_as(capability: str | None = None, driver: str | None = "580.159.04") -> dict:
    """An H100 as nvidia-smi reports it: its driver, 81,559 MiB and ``capability``."""
    machine = gpu_machine(H100)
    device = machine["accelerators"]["devices"][0]  # type: ignore[index]
    device.update(driver=driver, compute_capability=capability)
    return machine


def _beside_unknown() -> dict:
    """An H100 beside a GPU whose memory nvidia-smi reports as [N/A]."""
    machine = gpu_machine(H100, "NVIDIA GH200 480GB")
    machine["accelerators"]["devices"][1]["memory_mb"] = None  # type: ignore[index]
    return machine


@pytest.mark.parametrize(
    ("claim", "machine", "kinds"),
    [
        (MachineClaim(gpu_name=H100), CPU_MACHINE, ["machine_mismatch"]),
        (MachineClaim(gpu_name=H100), gpu_machine("NVIDIA H200"), ["machine_mismatch"]),
        (MachineClaim(gpu_name=H100), gpu_machine(H100), []),
        (MachineClaim(gpu_name="nvidia  h100 80gb hbm3"), gpu_machine(H100), []),
        (MachineClaim(gpu_name=H100), gpu_machine("NVIDIA H200", H100), []),
        (MachineClaim(cpu_count=16), CPU_MACHINE, ["machine_mismatch"]),
        (MachineClaim(arch="aarch64"), CPU_MACHINE, ["machine_mismatch"]),
        (MachineClaim(cpu_count=2, arch="x86_64"), CPU_MACHINE, []),
        (MachineClaim(), CPU_MACHINE, []),
        (MachineClaim(driver="570.86.15"), _seen_as(), ["machine_mismatch"]),
        (MachineClaim(driver="580.159.04\n570.86.15"), _seen_as(), ["machine_mismatch"]),
        (MachineClaim(driver="580.159.04\n580.159.04"), _seen_as(), []),
        (MachineClaim(driver="570.86.15"), _seen_as(driver=None), []),
        (MachineClaim(gpu_capability="8.9"), _seen_as("9.0"), ["machine_mismatch"]),
        (MachineClaim(gpu_capability="9.0"), _seen_as("9.0"), []),
        (MachineClaim(gpu_capability="8.9"), _seen_as(None), []),
        (MachineClaim(gpu_memory_mb=143_156.0), _seen_as(), ["machine_mismatch"]),
        (MachineClaim(gpu_memory_mb=81_004.6), _seen_as(), []),
        (MachineClaim(driver="570.86.15", gpu_memory_mb=1e9), CPU_MACHINE, []),
        (MachineClaim(gpu_memory_mb=97_280.0), _beside_unknown(), []),
    ],
    ids=[
        "gpu-on-a-cpu-machine",
        "another-gpu",
        "the-gpu-seen",
        "spelled-otherwise",
        "one-of-two",
        "cpu-count",
        "architecture",
        "the-cpus-seen",
        "no-claim",
        "another-driver",
        "one-gpu-of-two-on-another-driver",
        "a-line-a-gpu",
        "driver-not-reported",
        "another-capability",
        "the-capability-seen",
        "capability-not-reported",
        "more-memory-than-the-gpu",
        "torchs-smaller-figure",
        "no-gpu-seen-the-name-decides",
        "beside-a-gpu-of-unknown-memory",
    ],
)
def test_each_machine_claim_is_held_against_the_records_observation(
    claim: MachineClaim, machine: dict, kinds: list[str]
) -> None:
    f = Findings("performance", Policy())
    claim_findings(f, "the benchmark file", claim, record("performance", environment=machine))
    assert _kinds(f) == kinds
    assert all(x.severity.blocks for x in f.items)


@pytest.mark.parametrize(
    ("sizes", "bound"),
    [([81559], 81559.0), ([16384, 81559], 81559.0), ([16384, None], None), ([None], None)],
    ids=["one", "the-largest", "one-of-unknown-size-may-be-larger", "unknown"],
)
def test_memory_is_bounded_by_the_largest_gpu_and_only_where_every_size_is_known(
    sizes: list[int | None], bound: float | None
) -> None:
    machine = gpu_machine(*[H100] * len(sizes))
    for device, size in zip(machine["accelerators"]["devices"], sizes, strict=True):  # type: ignore[index]
        device["memory_mb"] = size
    assert device_memory_mb(machine) == bound


def test_a_gpu_claim_where_the_look_for_gpus_failed_is_unobserved() -> None:
    failed = {**CPU_MACHINE, "accelerators": {**CPU_MACHINE["accelerators"], "error": "exit 9"}}
    f = Findings("performance", Policy())
    claim_findings(f, "the benchmark file", MachineClaim(gpu_name=H100), record(environment=failed))
    assert _kinds(f) == ["machine_unobserved"] and "exit 9" in f.items[0].detail


@pytest.mark.parametrize("dropped", ["accelerators", "cpu_count", "platform"])
def test_a_record_without_the_machine_it_ran_on_blocks(dropped: str) -> None:
    environment = {k: v for k, v in CPU_MACHINE.items() if k != dropped}
    f = Findings("execution", Policy())
    record_findings(f, record(environment=environment), NOW, 2.0)
    assert _kinds(f) == ["machine_unobserved"] and dropped in f.items[0].title


@pytest.mark.parametrize(
    ("start", "kinds"),
    [
        ("2099-01-01T00:00:00Z", ["clock_future"]),
        ("2026-01-01T00:09:59Z", []),  # ends 00:10:00 + 1 s: inside the 2 s tolerance
        ("2026-01-01T00:10:05Z", ["clock_future"]),
        ("2025-12-31T23:00:00Z", []),
    ],
)
def test_a_record_dated_after_the_reports_clock_blocks(start: str, kinds: list[str]) -> None:
    f = Findings("execution", Policy())
    record_findings(f, record(start=start, duration_s=1.0), NOW, 2.0)
    assert _kinds(f) == kinds


def _edit(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2))


def _performance(root: Path) -> dict:
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    return next(s for s in verdict["stages"] if s["name"] == "performance")


def test_a_committed_gpu_run_replayed_on_a_cpu_machine_blocks_naming_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real H100 result, its commit and time rewritten to the stage's own, as the stage's
    command could write it: every figure consistent, the machine not the one that ran."""
    root = copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    raw = root / "reports" / "raw"
    stage = json.loads((raw / "performance.json").read_text())
    gpu = json.loads((FIXTURES / "benchmark-h100-80gb-hbm3.json").read_text())
    gpu["commit_info"]["id"] = stage["commit"]
    gpu["datetime"] = stage["start"]
    (raw / "benchmark.json").write_text(json.dumps(gpu))
    _edit(raw / "performance.json", lambda d: d.update(duration_s=60.0))
    reseal(raw)
    assert report_cli(root) == 1
    kinds = {f["kind"] for f in _performance(root)["findings"]}
    assert "machine_mismatch" in kinds
    mismatch = [f for f in _performance(root)["findings"] if f["kind"] == "machine_mismatch"]
    assert any(H100 in f["title"] and "no GPU" in f["title"] for f in mismatch)


def test_a_record_and_its_file_dated_in_2099_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_scenario(tmp_path, "pass-cpu", monkeypatch)
    raw = root / "reports" / "raw"
    future = (datetime.now(UTC) + timedelta(days=365 * 73)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _edit(raw / "benchmark.json", lambda d: d.update(datetime=future))
    _edit(raw / "performance.json", lambda d: d.update(start=future))
    reseal(raw)
    assert report_cli(root) == 1
    stage = _performance(root)
    assert "clock_future" in {f["kind"] for f in stage["findings"]}


def test_the_judge_holds_a_record_against_the_clock_it_is_given() -> None:
    data = StageData(record(start="2099-01-01T00:00:00Z"), suite=suite(case("t")))
    assert judge_stage("execution", data, Policy()).findings == ()  # no clock given
    with_clock = judge_stage("execution", data, Policy(), now=NOW)
    assert [f.kind for f in with_clock.findings] == ["clock_future"]
    assert decide([with_clock]).decision is Decision.BLOCK


def _junit(tmp_path: Path, timestamp: str, suite_s: object, case_s: object) -> TestSuite:
    path = tmp_path / "junit.xml"
    path.write_text(
        f'<testsuites><testsuite name="s" tests="1" time="{suite_s}" timestamp="{timestamp}">'
        f'<testcase classname="t" name="a" time="{case_s}"/></testsuite></testsuites>'
    )
    return read_junit(path, root=tmp_path)


# The stage ran from 2026-01-01T00:00:00Z for 60 s; the clock tolerance is 2 s.
@pytest.mark.parametrize(
    ("timestamp", "suite_s", "case_s", "kinds"),
    [
        ("2026-01-01T00:00:01+00:00", 50, 49, []),
        ("2026-01-01T01:00:30+01:00", 50, 49, []),  # the same time in another zone
        ("2019-01-01T00:00:00+00:00", 50, 49, ["clock_future"]),
        ("2026-01-01T00:01:05Z", 0, 0, ["clock_future"]),  # after the run ended
        ("2026-01-01T10:00:00", 50, 49, []),  # local time at UTC+10
        ("2025-12-31T13:00:00", 50, 49, []),  # at UTC-11
        ("2025-12-31T11:00:00", 50, 49, ["clock_future"]),  # no zone is 13 h behind
        ("2026-01-01T15:00:00", 50, 49, ["clock_future"]),  # nor 15 h ahead
        ("yesterday", 50, 49, []),  # no time: no claim
        ("2026-01-01T00:00:01Z", 86400, 49, ["evidence_impossible"]),
        ("2026-01-01T00:00:01Z", 50, 70, ["evidence_impossible"]),
        ("2026-01-01T00:00:01Z", 61.5, 61.5, []),  # within the tolerance
        ("2026-01-01T00:00:01Z", 50, "inf", ["evidence_impossible"]),
        ("2026-01-01T00:00:01Z", "NaN", 49, ["evidence_impossible"]),
        ("2026-01-01T00:00:01Z", 50, "1e400", ["evidence_impossible"]),
        ("2026-01-01T00:00:01Z", 50, "soon", []),  # no number: no claim
        # thousands grouped, as Maven Surefire writes them: a claim like any other
        ("2026-01-01T00:00:01Z", "1,000,000.0", 49, ["evidence_impossible"]),
        ("2026-01-01T00:00:01Z", 50, "1,000.5", ["evidence_impossible"]),
        ("2026-01-01T00:00:01Z", 50, "0,500", []),  # a decimal comma: no number, no claim
    ],
)
def test_a_junit_file_is_dated_inside_its_stages_run_and_took_no_longer(
    tmp_path: Path, timestamp: str, suite_s: object, case_s: object, kinds: list[str]
) -> None:
    f = Findings("execution", Policy())
    junit_clock_findings(
        f, _junit(tmp_path, timestamp, suite_s, case_s), record(duration_s=60.0), 2.0
    )
    assert sorted(_kinds(f)) == kinds
    assert all(x.severity is Severity.CRITICAL for x in f.items)


@pytest.mark.parametrize(
    ("timestamp", "kinds"),
    [
        ("2026-01-01T00:00:30.123456", []),  # coverage json writes local time, no zone
        ("2026-01-01T13:00:00", []),  # at UTC+13
        ("2025-12-30T09:00:00", ["clock_future"]),  # an earlier day's run
        (None, []),  # no time: no claim
    ],
)
def test_a_coverage_file_is_dated_inside_its_stages_run(
    tmp_path: Path, timestamp: str | None, kinds: list[str]
) -> None:
    doc = json.loads((FIXTURES / "pass-cpu" / "coverage.json").read_text())
    doc["meta"] = {"timestamp": timestamp} if timestamp else {}
    (tmp_path / "coverage.json").write_text(json.dumps(doc))
    data = StageData(record(duration_s=60.0), coverage=read_coverage(tmp_path / "coverage.json"))
    f = Findings("execution", Policy())
    machine_findings(f, data, None, 2.0)
    assert sorted(_kinds(f)) == kinds
