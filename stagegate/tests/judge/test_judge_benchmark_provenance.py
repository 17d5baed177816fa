"""A benchmark file is evidence of the stage run that names it only: written for the record's
commit, while the stage ran, and on the GPU the job's host saw. A replayed or stale file (a
stored H100 baseline copied in on a CPU machine) blocks, naming the field; a fresh one passes."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stagegate.cli import main
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy, policy_from_mapping
from stagegate.model import Benchmark, Decision, StageVerdict
from stagegate.record import machine

from ..builders import FIXTURES, bench, performance, record, report_cli

POLICY = Policy()
SHA = "1234567890abcdef1234567890abcdef12345678"
H100_FILE = FIXTURES / "benchmark-h100-80gb-hbm3.json"
HOST = {"sha": SHA, "gpu_name": "NVIDIA H100 80GB HBM3", "driver": "570"}


def judged(b: Benchmark, host: dict[str, Any] | None = None, **rec: Any) -> StageVerdict:
    """``b`` judged as the file of a performance stage that ran commit SHA from 00:00:00 for
    ten minutes (``rec`` changes the record)."""
    run = {"commit": SHA, "start": "2026-01-01T00:00:00Z", "duration_s": 600.0, **rec}
    data = replace(performance(b), record=record("performance", **run))
    return judge_stage("performance", data, POLICY, host=host)


def blocked_on(stage: StageVerdict, field: str) -> bool:
    return decide([stage]).decision is Decision.BLOCK and any(
        field in f.title for f in stage.blocking
    )


def run_of(**kw: Any) -> Benchmark:
    return replace(bench(), **{"commit": SHA, "datetime": "2026-01-01T00:05:00Z", **kw})


def test_a_file_of_the_run_passes() -> None:
    assert judged(run_of()).blocking == ()
    assert judged(run_of(), host=HOST).blocking == ()
    edge = judged(run_of(datetime="2026-01-01T00:10:02Z"))  # the end, and the clock tolerance
    assert edge.blocking == ()
    early = judged(run_of(datetime="2025-12-31T23:59:58Z"))  # the start, less the tolerance
    assert early.blocking == ()


def test_a_stage_that_took_no_time_ends_where_it_started() -> None:
    """A record of 0 s (or an impossible negative one) bounds the file to start +- tolerance."""
    for duration in (0.0, -5.0):
        late = judged(run_of(datetime="2026-01-01T00:00:02.5Z"), duration_s=duration)
        assert blocked_on(late, "datetime"), duration
        on_time = judged(run_of(datetime="2026-01-01T00:00:02Z"), duration_s=duration)
        assert not blocked_on(on_time, "datetime"), duration


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"commit": "fedcba9876543210fedcba9876543210fedcba98"}, "commit_info.id"),
        ({"commit": None}, "commit_info.id"),
        ({"datetime": "2025-12-31T23:59:00Z"}, "datetime"),  # before the stage started
        ({"datetime": "2026-01-01T00:10:03Z"}, "datetime"),  # after it ended
        ({"datetime": ""}, "datetime"),
        ({"datetime": "2026-01-01T00:05:00"}, "datetime"),  # no zone: no instant
        ({"datetime": "yesterday"}, "datetime"),
    ],
)
def test_a_file_of_another_run_blocks_naming_the_field(change: dict, field: str) -> None:
    assert blocked_on(judged(run_of(**change)), field)


@pytest.mark.parametrize(
    "rec", [{"commit": None}, {"start": "not a time"}, {"start": "2026-01-01T00:00:00"}]
)
def test_a_record_that_cannot_tie_its_file_blocks(rec: dict) -> None:
    stage = judged(run_of(), **rec)
    assert decide([stage]).decision is Decision.BLOCK
    assert any(f.kind == "evidence_unchecked" for f in stage.blocking)


@pytest.mark.parametrize(
    ("host", "file_gpu", "field"),
    [
        ({**HOST, "gpu_name": "NVIDIA A100-SXM4-80GB"}, "NVIDIA H100 80GB HBM3", "gpu_name"),
        (HOST, None, "gpu_name"),  # a CPU run handed in by a GPU job
        ({**HOST, "gpu_name": ""}, "NVIDIA H100 80GB HBM3", "gpu_name"),
        ({"sha": SHA}, "NVIDIA H100 80GB HBM3", "gpu_name"),
        ({**HOST, "sha": "f" * 40}, "NVIDIA H100 80GB HBM3", "commit_info.id"),
    ],
)
def test_the_gpu_the_host_saw_must_be_the_files(
    host: dict, file_gpu: str | None, field: str
) -> None:
    assert blocked_on(judged(run_of(gpu_name=file_gpu), host=host), field)


def test_the_gpu_names_are_compared_word_for_word_ignoring_case_and_spacing() -> None:
    host = {**HOST, "gpu_name": "  nvidia H100 80GB  HBM3\n"}
    assert judged(run_of(), host=host).blocking == ()
    assert blocked_on(judged(run_of(), host={**HOST, "gpu_name": "NVIDIA H100 PCIe"}), "gpu_name")


def test_the_clock_tolerance_is_the_policys() -> None:
    late = run_of(datetime="2026-01-01T00:10:30Z")
    assert blocked_on(judged(late), "datetime")
    table = {"benchmark": {"clock_tolerance_s": 60}}
    policy = policy_from_mapping(table)
    data = replace(performance(late), record=record("performance", commit=SHA, duration_s=600.0))
    assert judge_stage("performance", data, policy).blocking == ()
    with pytest.raises(Exception, match="clock_tolerance_s"):
        policy_from_mapping({"benchmark": {"clock_tolerance_s": 0}})


# --- the attack as it was run: a stored H100 result copied in by the stage's command -------------


def _stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *command: str) -> None:
    """``stagegate run performance`` of ``command`` in ``tmp_path`` (no git checkout there: the
    record's commit is GITHUB_SHA, as on CI)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_SHA", SHA)
    raw = tmp_path / "reports" / "raw"
    raw.mkdir(parents=True)
    out = str(raw / "benchmark.json")
    main(["run", "performance", "--out-dir", str(raw), "--benchmark", out, "--", *command, out])


def _verdict(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "reports" / "verdict.json").read_text())


def test_a_replayed_h100_file_blocks_on_a_cpu_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stage(tmp_path, monkeypatch, "cp", str(H100_FILE))
    assert report_cli(tmp_path, "--only", "performance") == 1
    reasons = " ".join(_verdict(tmp_path)["blocking_reasons"])
    assert "commit_info.id" in reasons and "datetime" in reasons


WRITE_FRESH = """
import json, sys, time
doc = json.load(open(sys.argv[1]))
doc["commit_info"]["id"] = sys.argv[2]
doc["datetime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
for arm in doc["precisions"].values():  # windows this stage could have timed: milliseconds
    arm["window_s"] = [w * 1e-4 for w in arm.get("window_s") or ()]
json.dump(doc, open(sys.argv[3], "w"))
"""


def test_a_file_written_by_the_stage_for_its_commit_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu = str(FIXTURES / "pass-cpu" / "benchmark.json")
    _stage(tmp_path, monkeypatch, sys.executable, "-c", WRITE_FRESH, cpu, SHA)
    assert report_cli(tmp_path, "--only", "performance") == 0, _verdict(tmp_path)


# A stand-in nvidia-smi first on the stage's PATH, naming the GPU the replayed file claims
FAKE_SMI = "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 580.159.04, 81559, 9.0'\n"


@pytest.mark.slow
@pytest.mark.parametrize("driver", [None, "NVIDIA H100 80GB HBM3"], ids=["no-driver", "h100"])
def test_a_tool_on_the_path_that_names_a_gpu_the_driver_lacks_observes_no_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, driver: str | None
) -> None:
    """The H100 file written fresh for the commit, its machine claimed by a program that calls
    itself nvidia-smi: on a Linux machine whose kernel driver lists no such GPU, the record's
    look for GPUs failed and the claim blocks; where the driver lists it, the machine is seen."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text(FAKE_SMI)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    proc = tmp_path / "gpus"
    if driver:
        (proc / "0000:00:06.0").mkdir(parents=True)
        (proc / "0000:00:06.0" / "information").write_text(f"Model: \t\t {driver}\n")
    (tmp_path / "osrelease").write_text("6.8.0-1015-aws\n")
    monkeypatch.setattr(machine, "KERNEL", machine.Kernel("linux", proc, tmp_path / "osrelease"))
    _stage(tmp_path, monkeypatch, sys.executable, "-c", WRITE_FRESH, str(H100_FILE), SHA)
    report_cli(tmp_path, "--only", "performance")
    findings = _verdict(tmp_path)["stages"][0]["findings"]
    gpu = {f["kind"] for f in findings if "claims GPU" in f["title"]}  # (its CPU count is 16)
    assert gpu == ({"machine_unobserved"} if driver is None else set())
    if driver is None:
        assert _verdict(tmp_path)["decision"] == "BLOCK"


@pytest.mark.slow
def test_host_facts_reach_the_judge_and_a_bad_file_stops_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu = str(FIXTURES / "pass-cpu" / "benchmark.json")
    _stage(tmp_path, monkeypatch, sys.executable, "-c", WRITE_FRESH, cpu, SHA)
    host = tmp_path / "host.json"
    host.write_text(json.dumps(HOST))
    assert report_cli(tmp_path, "--only", "performance", "--host", str(host)) == 1
    assert "gpu_name" in " ".join(_verdict(tmp_path)["blocking_reasons"])
    host.write_text("[1]")
    assert report_cli(tmp_path, "--only", "performance", "--host", str(host)) == 2
    assert report_cli(tmp_path, "--only", "performance", "--host", str(tmp_path / "no")) == 2


def test_the_time_check_reads_utc_offsets() -> None:
    offset = run_of(datetime="2026-01-01T01:05:00+01:00")  # 00:05 UTC
    assert judged(offset).blocking == ()
    assert blocked_on(judged(run_of(datetime="2026-01-01T00:05:00-01:00")), "datetime")


@pytest.fixture
def kolkata(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's local zone set to UTC+05:30 for the test."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_run_is_said_in_utc_whatever_the_machines_zone(kolkata: None) -> None:
    late = judged(run_of(datetime="2026-01-01T00:10:03Z"))
    (finding,) = [f for f in late.blocking if "datetime" in f.title]
    assert "to 2026-01-01T00:10:00Z" in finding.title, finding.title


@pytest.mark.parametrize(("duration", "blocks"), [(600.0, False), (20.0, True)])
def test_windows_longer_than_the_stage_ran_are_impossible(duration: float, blocks: bool) -> None:
    b = bench()  # 32-true's, tf32's and both 16-bit precisions' windows: 38 s in all
    timed = sum(w for p in b.precisions for w in p.window_s if w is not None)
    assert 20.0 + Policy().benchmark.clock_tolerance_s < timed < 600.0
    stage = judged(b, duration_s=duration)
    impossible = [f for f in stage.blocking if f.kind == "evidence_impossible"]
    assert bool(impossible) is blocks and blocked_on(stage, "windows") is blocks
