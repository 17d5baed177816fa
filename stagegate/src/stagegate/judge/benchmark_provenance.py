"""The benchmark file tied to the run that claims it: written for the commit the stage's record
ran, while that stage ran, and (where the GPU job's host.json is given) on the GPU the host saw.

A file copied in from another run (a stored H100 baseline replayed on a CPU machine, a stale
result of an earlier commit) holds real, self-consistent figures: only these ties tell it from
the stage's own measurement. A tie that cannot be checked blocks like one that fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from stagegate.judge.evidence import flag
from stagegate.judge.findings import Findings
from stagegate.kinds import Kind
from stagegate.model import Benchmark, StageRecord

FIX = "run the benchmark in this stage and keep the file it writes: a file of another run is not "
FIX += "evidence of this one"


def _instant(text: object) -> datetime | None:
    """An ISO 8601 time with its zone, as UTC; None for anything else."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment.astimezone(UTC) if moment.tzinfo is not None else None


def _commit(f: Findings, bench: Benchmark, record: StageRecord) -> None:
    if not record.commit:
        flag(
            f,
            Kind.EVIDENCE_UNCHECKED,
            "commit_info.id",
            "the stage's record names no commit to tie the file to",
            fix="run the stage inside the git checkout, or with GITHUB_SHA set",
        )
    elif not bench.commit:
        flag(f, Kind.EVIDENCE_MISSING, "commit_info.id", "absent: the file names no commit")
    elif bench.commit != record.commit:
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            "commit_info.id",
            f"is {bench.commit[:40]!r}, the stage ran commit {record.commit[:40]!r}",
            fix=FIX,
        )


def _time(f: Findings, bench: Benchmark, record: StageRecord, tolerance_s: float) -> None:
    written, start = _instant(bench.datetime), _instant(record.start)
    if start is None:
        flag(f, Kind.EVIDENCE_UNCHECKED, "datetime", "the stage's record has no start time")
        return
    if written is None:
        flag(f, Kind.EVIDENCE_MISSING, "datetime", "absent or not an ISO 8601 time with its zone")
        return
    slack = timedelta(seconds=tolerance_s)
    end = start + timedelta(seconds=max(record.duration_s, 0.0))
    if not start - slack <= written <= end + slack:
        flag(
            f,
            Kind.EVIDENCE_IMPOSSIBLE,
            "datetime",
            f"{bench.datetime[:40]} is outside the stage's run, {record.start} to "
            f"{end.isoformat(timespec='seconds').replace('+00:00', 'Z')}",
            detail=f"clock tolerance {tolerance_s:g} s ([tool.stagegate.benchmark] "
            "clock_tolerance_s)",
            fix=FIX,
        )


def _name(gpu: str) -> str:
    """A GPU's name as compared: its words, case folded (nvidia-smi and torch spell it alike
    otherwise)."""
    return " ".join(gpu.split()).casefold()


def _host(f: Findings, bench: Benchmark, record: StageRecord, host: Mapping[str, Any]) -> None:
    """The GPU the host saw is the file's; the commit the host ran is the record's."""
    seen = host.get("gpu_name")
    if not isinstance(seen, str) or not seen.strip():
        flag(f, Kind.EVIDENCE_UNCHECKED, "machine_info.gpu_name", "host.json names no GPU")
    elif bench.gpu_name is None:
        flag(f, Kind.EVIDENCE_MISSING, "machine_info.gpu_name", f"absent; the host has {seen!r}")
    elif _name(bench.gpu_name) != _name(seen):
        flag(
            f,
            Kind.EVIDENCE_IMPOSSIBLE,
            "machine_info.gpu_name",
            f"is {bench.gpu_name[:80]!r}, the host's GPU is {seen[:80]!r}",
            fix=FIX,
        )
    sha = host.get("sha")
    if sha is not None and sha != record.commit:
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            "commit_info.id",
            f"host.json ran commit {str(sha)[:40]!r}, the stage's record {record.commit!r}",
            fix="give the host.json of this stage's GPU job",
        )


def provenance_findings(
    f: Findings,
    bench: Benchmark,
    record: StageRecord,
    tolerance_s: float,
    host: Mapping[str, Any] | None = None,
) -> None:
    """Findings when the file cannot be tied to the stage run that names it (its commit, its
    time, and with ``host`` the GPU it ran on), each naming the field."""
    _commit(f, bench, record)
    _time(f, bench, record, tolerance_s)
    if host is not None:
        _host(f, bench, record, host)
