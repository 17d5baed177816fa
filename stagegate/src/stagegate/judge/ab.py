"""The A/B regression check: a base and a head commit measured in one job, on one device, in
interleaved windows. First the evidence (both sides there, the commits the ones asked for, the
same preset, every window finite and positive, the windows interleaved), then each head/base
ratio, derived from the raw windows with its exact bootstrap interval
(:func:`stagegate.judge.derive.paired`; a file's own summary is never read), against the
policy's limit: an interval wholly beyond it is a regression, one wholly within it passes,
and one that straddles it is NOT VERIFIED, which blocks too."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from stagegate.judge.derive import paired
from stagegate.judge.evidence import flag
from stagegate.judge.findings import Findings
from stagegate.judge.physics import ab_physics, memory_bound
from stagegate.judge.policy import Policy
from stagegate.kinds import Kind
from stagegate.model import ABCheck, ABOutcome, ABRun, ABSide

_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
ROLES = ("base", "head")


def _commits(f: Findings, run: ABRun, expected_base: str | None, head_commit: str | None) -> bool:
    """Both commits named in full, the head the one the stage ran at, the base the one asked
    for, and two different commits unless the same one was asked for on purpose."""
    base, head = run.base.sha or "", run.head.sha or ""
    for role, sha in zip(ROLES, (base, head), strict=True):
        if not _SHA.fullmatch(sha):
            flag(f, Kind.EVIDENCE_MISSING, f"A/B {role}.sha", "not a full commit id")
            return False
    if head_commit and not head.startswith(head_commit.lower()):
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            "A/B head.sha",
            f"names {head[:12]}, while the stage ran at {head_commit[:12]}",
        )
    if expected_base and not base.startswith(expected_base.lower()):
        flag(
            f,
            Kind.EVIDENCE_INCONSISTENT,
            "A/B base.sha",
            f"names {base[:12]}, while the base asked for is {expected_base[:12]}",
            fix="run the A/B against the base the judge is given (--ab-base)",
        )
    if base == head and not (expected_base and head.startswith(expected_base.lower())):
        flag(
            f,
            Kind.EVIDENCE_UNCHECKED,
            "A/B base.sha",
            f"is the head itself ({head[:12]}): a commit measured against itself shows no "
            "regression",
            fix="run the A/B against the change's base commit; to measure a commit against "
            "itself on purpose, give the judge that commit as --ab-base",
        )
    return True


def _clean(f: Findings, run: ABRun) -> None:
    """Each side measured the commit it names: a tree with uncommitted changes is not that
    commit, and a file that does not say is no evidence either way."""
    for role, side in zip(ROLES, (run.base, run.head), strict=True):
        if side.dirty is None:
            flag(f, Kind.EVIDENCE_MISSING, f"A/B {role}.dirty", "absent or not true/false")
        elif side.dirty:
            flag(
                f,
                Kind.EVIDENCE_INCONSISTENT,
                f"A/B {role}.dirty",
                f"the {role} was measured with uncommitted changes: it is not {side.sha or '?'}",
                fix="commit the change, then run the A/B again from a clean tree",
            )


def _windows(f: Findings, side: ABSide, role: str, expected: int) -> tuple[float, ...] | None:
    where = f"A/B {role}.window_s"
    if len(side.window_s) != expected:
        flag(f, Kind.EVIDENCE_MISSING, where, f"holds {len(side.window_s)} windows, not {expected}")
        return None
    if any(w is None for w in side.window_s):
        flag(f, Kind.EVIDENCE_MISSING, where, "an entry is absent or not a finite number")
        return None
    values = tuple(w for w in side.window_s if w is not None)
    if any(w <= 0 for w in values):
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, where, "a window took no time or less")
        return None
    return values


def _interleaved(f: Findings, run: ABRun, windows: int) -> bool:
    """Each pair of windows ran one of each side: drift hits both alike."""
    pairs = [tuple(sorted(run.order[i : i + 2])) for i in range(0, len(run.order), 2)]
    if len(run.order) == 2 * windows and all(p == ROLES for p in pairs):
        return True
    flag(
        f,
        Kind.EVIDENCE_INCONSISTENT,
        "A/B order",
        "the windows did not run in base/head pairs",
        detail=f"{len(run.order)} entries for {windows} windows a side",
    )
    return False


def _setup(f: Findings, run: ABRun, policy: Policy) -> int | None:
    """The run finished, on one declared preset on its device, with enough windows a side."""
    if run.status != "ok":
        f.add(
            Kind.BENCHMARK_FAILED,
            "the A/B run did not finish",
            detail=run.error or f"status {run.status!r}",
            fix="run the A/B locally (python -m amptrain.benchmark.ab) and read its output",
        )
        return None
    spec = policy.benchmark.presets.get(run.preset or "")
    if spec is None:
        flag(
            f,
            Kind.EVIDENCE_UNCHECKED,
            "A/B preset",
            f"{run.preset!r} is not declared in the policy",
        )
        return None
    if (run.device or "").split(":")[0] != spec.device:
        where = f"{run.device!r}, while preset {run.preset} runs on {spec.device}"
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, "A/B device", where)
        return None
    if run.precision not in spec.precisions:
        said = f"{str(run.precision)[:40]!r} is not one of preset {run.preset}'s precisions"
        flag(f, Kind.EVIDENCE_INCONSISTENT, "A/B precision", said)
        return None
    if spec.device == "cuda" and not run.machine.gpu_name:
        # the GPU it names is what the record's observation of the machine is held against
        flag(f, Kind.EVIDENCE_MISSING, "A/B machine_info.gpu_name", "absent on a CUDA preset")
        return None
    if run.base.preset != run.head.preset or not run.head.preset:
        flag(f, Kind.EVIDENCE_INCONSISTENT, "A/B preset", "base and head built different steps")
        return None
    n = run.windows
    if n is None or not policy.ab_min_windows <= n <= policy.benchmark.max_windows:
        flag(
            f,
            Kind.EVIDENCE_MISSING,
            "A/B windows",
            f"{n} a side; the policy needs {policy.ab_min_windows} to "
            f"{policy.benchmark.max_windows}",
        )
        return None
    return n


def _outcome(low: float, high: float, limit: float) -> ABOutcome:
    if low > limit:
        return ABOutcome.BEYOND
    return ABOutcome.WITHIN if high <= limit else ABOutcome.UNDECIDED


def _check(
    f: Findings, metric: str, head: Sequence[float], base: Sequence[float], limit_pct: float
) -> ABCheck:
    """The head/base ratio of ``metric`` and its interval, against ``limit_pct``."""
    ratio, (low, high) = paired(head, base)
    limit = 1 + limit_pct / 100
    outcome = _outcome(low, high, limit)
    words = f"head/base {metric.replace('_', ' ')} {ratio:.3f}x (95% interval {low:.3f}-{high:.3f})"
    if outcome is ABOutcome.BEYOND:
        f.add(
            Kind.AB_REGRESSION,
            f"{metric.replace('_', ' ')} regressed: {words}",
            detail=f"the whole interval lies beyond the limit of {limit:.3f}x "
            f"(+{limit_pct:g}%) over {len(head)} interleaved windows a side",
            fix="profile the step on both commits (benchmarks/step_profile.py) and find what "
            "the change added",
        )
    elif outcome is ABOutcome.UNDECIDED:
        f.add(
            Kind.AB_UNDECIDED,
            f"{metric.replace('_', ' ')} NOT VERIFIED: {words} straddles the limit {limit:.3f}x",
            detail="the interval is too wide to tell a regression from noise",
            fix="run the A/B with more windows (--windows), or on a quieter machine",
        )
    return ABCheck(metric, ratio, low, high, limit, outcome, "", "", len(head))


def _memory(f: Findings, run: ABRun, policy: Policy) -> ABCheck | None:
    peaks = []
    for role, side in zip(ROLES, (run.base, run.head), strict=True):
        values = side.peak_mb
        if len(values) != run.windows or any(v is None or v <= 0 for v in values):
            flag(f, Kind.EVIDENCE_MISSING, f"A/B {role}.peak_mb", "not a positive figure a window")
            return None
        peaks.append(tuple(v for v in values if v is not None))
    return _check(f, "peak_memory", peaks[1], peaks[0], policy.ab_memory_limit_pct)


def _most(values: tuple[float | None, ...]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _unmeasured(f: Findings, run: ABRun) -> None:
    """On a preset that measures no memory, the file holds no memory figure: one that is there
    was not measured by the run that claims it."""
    sides = {role: side.peak_mb for role, side in zip(ROLES, (run.base, run.head), strict=True)}
    held = [
        f"{role}.peak_mb" for role, values in sides.items() if any(v is not None for v in values)
    ]
    if held:
        where = f"A/B {', '.join(held)}"
        flag(f, Kind.EVIDENCE_IMPOSSIBLE, where, f"preset {run.preset} measures no memory")


def ab_findings(
    f: Findings,
    run: ABRun,
    policy: Policy,
    expected_base: str | None,
    head_commit: str | None,
    cores: int | None = None,
    device_mb: float | None = None,
) -> tuple[ABCheck, ...]:
    """Findings about an A/B file, and the outcome of each ratio it lets the judge compute
    (``cores``: the CPUs the stage's record saw, which bound a CPU run's arithmetic;
    ``device_mb``: the memory of its GPU, which bounds the peaks)."""
    n = _setup(f, run, policy)
    if n is None or not _commits(f, run, expected_base, head_commit):
        return ()
    _clean(f, run)
    sides = [_windows(f, s, r, n) for r, s in zip(ROLES, (run.base, run.head), strict=True)]
    if sides[0] is None or sides[1] is None or not _interleaved(f, run, n):
        return ()
    spec = policy.benchmark.presets[run.preset or ""]
    ab_physics(f, run, spec, policy.benchmark, cores)
    step = _check(f, "step_time", sides[1], sides[0], policy.ab_step_time_limit_pct)
    memory = _memory(f, run, policy) if "memory" in spec.measures else _unmeasured(f, run)
    peaks = (_most(side.peak_mb) for side in (run.base, run.head))
    memory_bound(f, zip(("A/B base.peak_mb", "A/B head.peak_mb"), peaks, strict=True), device_mb)
    shas = {"base_sha": run.base.sha or "", "head_sha": run.head.sha or ""}
    return tuple(replace(c, **shas) for c in (step, memory) if c is not None)
