"""The machine and the clock, as observed: a record must hold what ``stagegate run`` saw of the
machine, must not be dated after the report's own clock, and every machine a stage's output
claims (its GPU, its CPU count, its architecture) must be the one the record observed.

A file copied in from another machine (a stored GPU run replayed where there is no GPU) holds
real, self-consistent figures; only the record's own observation tells it apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from stagegate.judge.findings import Findings
from stagegate.kinds import Kind
from stagegate.model import (
    Dated,
    MachineClaim,
    PrecisionResult,
    StageData,
    StageRecord,
    TestSuite,
)

# What stagegate run observes of every machine, by itself (stagegate.record.machine.observe)
FACTS = ("python", "platform", "machine", "cpu_count", "accelerators")
FIX = "run the stage with stagegate run on the machine it measures, and keep the files it writes"


def _devices(env: Mapping[str, Any]) -> tuple[list[str] | None, str]:
    """The GPU names the record observed, or None with why they cannot be known."""
    seen = env.get("accelerators")
    if not isinstance(seen, Mapping) or not isinstance(seen.get("devices"), list):
        return None, "the record holds no observation of its accelerators"
    if seen.get("error"):
        return None, f"the record's look for GPUs failed: {str(seen['error'])[:200]}"
    names = [d.get("name") for d in seen["devices"] if isinstance(d, Mapping)]
    return [n for n in names if isinstance(n, str)], ""


def device_memory_mb(env: Mapping[str, Any]) -> float | None:
    """The memory of the largest GPU the record saw (MiB), None where it saw no such figure
    for any of them (a GPU whose memory the driver reports as [N/A] may be the largest)."""
    devices, _ = _devices(env)
    sizes = _seen(env, "memory_mb")
    known = [m for m in sizes if isinstance(m, int | float) and m > 0]
    if not devices or len(known) < len(devices):
        return None  # no GPU seen, no look that can be trusted, or a GPU of unknown size
    return float(max(known))


def _words(name: str) -> str:
    return " ".join(name.split()).casefold()


def _missing_facts(f: Findings, record: StageRecord) -> None:
    env = record.environment
    missing = [k for k in FACTS if env.get(k) in (None, "")]
    if missing:
        f.add(
            Kind.MACHINE_UNOBSERVED,
            f"the record holds no observation of the machine's {', '.join(missing)}",
            detail="stagegate run writes these itself; a record without them was not written "
            "by it, or was edited",
            fix="run the stage again with stagegate run (this version or later)",
        )


def _future(f: Findings, record: StageRecord, now: datetime, tolerance_s: float) -> None:
    try:
        start = datetime.fromisoformat(record.start).astimezone(UTC)
    except (TypeError, ValueError):
        return  # the record's reader refuses a start that is no time
    end = start + timedelta(seconds=max(record.duration_s, 0.0))
    if end > now + timedelta(seconds=tolerance_s):
        f.add(
            Kind.CLOCK_FUTURE,
            f"the stage's record is dated after this report's clock ({record.start[:40]})",
            detail=f"it ends at {end.isoformat(timespec='seconds')}; the report ran at "
            f"{now.isoformat(timespec='seconds')} (tolerance {tolerance_s:g} s)",
            fix="run the stage again; a record from the future was not written by this run",
        )


def record_findings(
    f: Findings, record: StageRecord, now: datetime | None, tolerance_s: float
) -> None:
    """The record observed the machine, and is not dated after the report's clock ``now``."""
    _missing_facts(f, record)
    if now is not None:
        _future(f, record, now, tolerance_s)


def _gpu(f: Findings, what: str, claimed: str, env: Mapping[str, Any]) -> None:
    devices, why = _devices(env)
    if devices is None:
        f.add(
            Kind.MACHINE_UNOBSERVED,
            f"{what} claims GPU {claimed[:80]!r}; the stage's machine was not observed",
            detail=why,
            fix=FIX,
        )
    elif _words(claimed) not in {_words(d) for d in devices}:
        had = ", ".join(repr(d[:80]) for d in devices) or "no GPU"
        f.add(
            Kind.MACHINE_MISMATCH,
            f"{what} claims GPU {claimed[:80]!r}; the stage's machine had {had}",
            fix=FIX,
        )


def gpu_unused_findings(f: Findings, what: str, record: StageRecord) -> None:
    """``what`` went without CUDA, which the policy excuses only where there is none: a
    stage whose machine stagegate run saw GPUs on has no such excuse."""
    devices, why = _devices(record.environment)
    if devices is None:
        f.add(
            Kind.MACHINE_UNOBSERVED,
            f"{what} as if without CUDA; whether the stage's machine had a GPU is unknown",
            detail=why,
            fix="run the stage where stagegate run can see the machine's GPUs (nvidia-smi that "
            "answers, or the NVIDIA driver's list), or none",
        )
    elif devices:
        f.add(
            Kind.MACHINE_MISMATCH,
            f"{what} as if without CUDA; the stage's machine had "
            + ", ".join(repr(d[:80]) for d in devices),
            fix="run the stage on the GPU the machine has (a torch built with CUDA), or "
            "where there is none",
        )


# torch's figure of a GPU's memory is below the driver's (the H200: 143,156 MiB against
# 143,771); one above the driver's by more than rounding is a GPU the record did not see.
MEMORY_SLACK = 1.01


def _seen(env: Mapping[str, Any], key: str) -> list[Any]:
    """Each value of ``key`` the record observed of the machine's GPUs (none where it saw no
    such figure, or no GPU)."""
    if not _devices(env)[0]:
        return []
    devices = [d for d in env["accelerators"]["devices"] if isinstance(d, Mapping)]
    return [
        d[key] for d in devices if d.get(key) not in (None, "") and not isinstance(d[key], bool)
    ]


def _gpu_facts(f: Findings, what: str, claim: MachineClaim, env: Mapping[str, Any]) -> None:
    """The driver, compute capability and memory ``what`` claims for its GPU, each held to
    those the record's look saw (a fact the look did not report is left as claimed)."""
    drivers = {str(d).strip() for d in _seen(env, "driver")}
    said = (claim.driver or "").split()  # nvidia-smi answers a line a GPU
    wrong = [d for d in said if d not in drivers]
    if drivers and wrong:
        _mismatch(f, what, f"NVIDIA driver {wrong[0][:40]}", ", ".join(sorted(drivers)))
    capabilities = {str(c).strip() for c in _seen(env, "compute_capability")}
    if capabilities and claim.gpu_capability and claim.gpu_capability not in capabilities:
        seen = ", ".join(sorted(capabilities))
        _mismatch(f, what, f"compute capability {claim.gpu_capability[:20]}", seen)
    largest = device_memory_mb(env)  # none where a GPU's memory is unknown
    if largest is not None and (claim.gpu_memory_mb or 0) > largest * MEMORY_SLACK:
        said = f"a GPU of {claim.gpu_memory_mb:,.0f} MiB"
        _mismatch(f, what, said, f"{largest:,.0f} MiB at most")


def _mismatch(f: Findings, what: str, claimed: str, seen: object) -> None:
    f.add(
        Kind.MACHINE_MISMATCH,
        f"{what} claims {claimed}; the stage's machine had {seen}",
        fix=FIX,
    )


def claim_findings(f: Findings, what: str, claim: MachineClaim, record: StageRecord) -> None:
    """Each machine fact ``what`` (a file of the stage) claims is the one the record saw."""
    env = record.environment
    if claim.gpu_name is not None:
        _gpu(f, what, claim.gpu_name, env)
    _gpu_facts(f, what, claim, env)
    for label, said, seen in (
        ("CPU count", claim.cpu_count, env.get("cpu_count")),
        ("architecture", claim.arch, env.get("machine")),
    ):
        if said is not None and seen is not None and said != seen:
            _mismatch(f, what, f"{label} {str(said)[:40]}", seen)


def machine_findings(
    f: Findings, data: StageData, now: datetime | None, tolerance_s: float
) -> None:
    """The record's own observations, then every claim of its outputs against them."""
    record = data.record
    if record is None:
        return
    record_findings(f, record, now, tolerance_s)
    if data.benchmark is not None:
        claim_findings(f, "the benchmark file", data.benchmark.machine, record)
        windows = [w for p in data.benchmark.precisions for w in p.window_s]
        windows += [_sync_steps_s(p) for p in data.benchmark.precisions]
        _timed_within_run(f, "the benchmark file", windows, record, tolerance_s)
    if data.suite is not None:
        junit_clock_findings(f, data.suite, record, tolerance_s)
    if data.coverage is not None:
        _dated_within_run(f, "coverage", data.coverage.dated, record, tolerance_s)
    if data.ab is not None:
        claim_findings(f, "the A/B file", data.ab.machine, record)
        _within_run(f, "the A/B file", data.ab.datetime, record, tolerance_s)
        windows = [*data.ab.base.window_s, *data.ab.head.window_s]
        _timed_within_run(f, "the A/B file", windows, record, tolerance_s)


def _sync_steps_s(p: PrecisionResult) -> float | None:
    """How long the steps a precision counted host syncs over took at the median speed of its
    own windows (each window bounded by the peak): more steps than the stage had time for
    would thin any count out to nothing per step."""
    windows = sorted(w for w in p.window_s if w is not None and 0 < w < math.inf)
    if not windows or not p.steps_per_window or not p.sync_steps or p.sync_steps < 0:
        return None
    return p.sync_steps * windows[len(windows) // 2] / p.steps_per_window


def _timed_within_run(
    f: Findings,
    what: str,
    windows: Sequence[float | None],
    record: StageRecord,
    tolerance_s: float,
) -> None:
    """The windows a file timed (and the steps it counted syncs over) ran one after another
    inside its stage: together they cannot be longer than the stage's run, as the record's own
    clock measured it."""
    # sum, not fsum: windows of 1e308 s add up to infinity (fsum raises), which is impossible
    timed = sum(w for w in windows if w is not None and 0 < w < math.inf)
    _longer_than_run(
        f, timed, f"{what} times {timed:.1f} s of windows and steps", "", record, tolerance_s
    )


def _longer_than_run(
    f: Findings, seconds: float, said: str, source: str, record: StageRecord, tolerance_s: float
) -> None:
    """A file that ``said`` it took ``seconds`` in one go: no longer than its stage ran."""
    if seconds > max(record.duration_s, 0.0) + tolerance_s:
        f.add(
            Kind.EVIDENCE_IMPOSSIBLE,
            f"{said} in a stage that ran {record.duration_s:.1f} s",
            detail=f"{source}clock tolerance {tolerance_s:g} s; the stage's duration is "
            "stagegate run's own measurement",
            fix=FIX,
        )


def _within_run(
    f: Findings, what: str, written: str, record: StageRecord, tolerance_s: float
) -> None:
    """A file the stage wrote is dated inside the stage's run."""
    try:
        at = datetime.fromisoformat(written).astimezone(UTC)
    except (TypeError, ValueError):
        at = None
    run = _run_span(record, tolerance_s)
    if at is None or run is None:
        f.add(
            Kind.CLOCK_FUTURE,
            f"{what} has no time of its own to hold against the stage's run",
            detail=f"datetime {written[:40]!r}",
            fix=FIX,
        )
        return
    if not run[0] <= at <= run[1]:
        f.add(
            Kind.CLOCK_FUTURE,
            f"{what} is dated {written[:40]}, outside the stage's run ({record.start[:40]}, "
            f"{record.duration_s:.0f} s)",
            detail=f"clock tolerance {tolerance_s:g} s",
            fix=FIX,
        )


# A time without a UTC offset is the producer's local time: some zone from UTC-12 to UTC+14.
BEHIND, AHEAD = timedelta(hours=12), timedelta(hours=14)


def _run_span(record: StageRecord, tolerance_s: float) -> tuple[datetime, datetime] | None:
    """When the stage's run began and ended by the record's clock, widened by the tolerance."""
    try:
        start = datetime.fromisoformat(record.start).astimezone(UTC)
    except (TypeError, ValueError):
        return None  # the record's reader refuses a start that is no time
    slack = timedelta(seconds=tolerance_s)
    return start - slack, start + timedelta(seconds=max(record.duration_s, 0.0)) + slack


def _dated_outside(dated: Dated, run: tuple[datetime, datetime]) -> str:
    """The first timestamp that no clock inside the run could have written, or ''."""
    begin, end = run
    aware, naive = dated.aware, dated.naive
    for at in aware or ():
        if not begin <= at <= end:
            return at.isoformat()
    local = (begin.replace(tzinfo=None) - BEHIND, end.replace(tzinfo=None) + AHEAD)
    for at in naive or ():
        if not local[0] <= at <= local[1]:
            return f"{at.isoformat()} (no UTC offset: any zone's time in the run passes)"
    return ""


def _dated_within_run(
    f: Findings, what: str, dated: Dated, record: StageRecord, tolerance_s: float, source: str = ""
) -> None:
    """A file (``what``: "JUnit", "coverage") written inside its stage's run, by the times it
    gives itself."""
    run = _run_span(record, tolerance_s)
    outside = _dated_outside(dated, run) if run else ""
    if outside:
        earlier = "results" if what == "JUnit" else what
        f.add(
            Kind.CLOCK_FUTURE,
            f"the {what} file is dated {outside[:80]}, outside the stage's run "
            f"({record.start[:40]}, {record.duration_s:.0f} s)",
            detail=f"{source}clock tolerance {tolerance_s:g} s: an earlier run's {earlier}, or "
            "a clock that is wrong",
            fix=FIX,
        )


def junit_clock_findings(
    f: Findings, suite: TestSuite, record: StageRecord, tolerance_s: float
) -> None:
    """A JUnit file's suites started inside its stage's run, and none of its tests or suites
    took longer than the run did, as the record's own clock measured it."""
    longest = max([suite.dated.longest_s, *(c.duration_s for c in suite.cases)])
    said = f"the JUnit file says a test took {longest:,.1f} s"
    _longer_than_run(f, longest, said, f"{suite.source}; ", record, tolerance_s)
    _dated_within_run(f, "JUnit", suite.dated, record, tolerance_s, f"{suite.source}; ")
