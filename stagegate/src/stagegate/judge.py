"""Findings from measurements, a status and a score per stage, and the decision: pure functions."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from stagegate.baseline import BaselineComparison
from stagegate.benchcheck import baseline_findings, benchmark_findings
from stagegate.findings import Findings
from stagegate.model import (
    Benchmark,
    Coverage,
    Curves,
    Finding,
    LintFinding,
    Location,
    Severity,
    StageStatus,
    TestCase,
    TestSuite,
    WarningEntry,
)
from stagegate.policy import Policy, check_threshold
from stagegate.records import StageRecord

_DEPRECATIONS = ("DeprecationWarning", "PendingDeprecationWarning", "FutureWarning")


@dataclass(frozen=True)
class StageData:
    """What a stage's record points at, as collected (or why it could not be)."""

    record: StageRecord | None
    suite: TestSuite | None = None
    coverage: Coverage | None = None
    warnings: tuple[WarningEntry, ...] = ()
    benchmark: Benchmark | None = None
    curves: Curves | None = None
    lint: dict[str, list[LintFinding]] = field(default_factory=dict)
    input_errors: tuple[str, ...] = ()
    missing_side_files: tuple[str, ...] = ()  # optional files the stage did not write
    baseline: BaselineComparison | None = None


@dataclass(frozen=True)
class Deduction:
    severity: Severity
    points: int
    title: str


@dataclass(frozen=True)
class StageVerdict:
    name: str
    status: StageStatus
    required: bool
    score: int
    findings: tuple[Finding, ...]
    deductions: tuple[Deduction, ...]
    data: StageData
    note: str = ""  # why a stage is NOT VERIFIED, in words
    skippable: bool = False

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity is severity)


@dataclass(frozen=True)
class Verdict:
    decision: str  # PASS or BLOCK
    score: int
    stages: tuple[StageVerdict, ...]
    blocking_reasons: tuple[str, ...]
    required_fixes: tuple[str, ...]


def _record_findings(f: Findings, record: StageRecord) -> bool:
    """Findings about how the command ended; True when it crashed rather than merely failed."""
    if record.error:
        f.add(
            "stage_failed",
            "stage command could not start",
            detail=record.error,
            fix="install the tool the stage runs, or fix the command in noxfile.py",
        )
        return True
    if record.timed_out:
        f.add(
            "stage_failed",
            f"stage timed out after {record.duration_s:.0f} s",
            detail=record.stderr_tail[-600:],
            fix="find the step that hangs or raise the stage's --timeout",
        )
        return True
    if record.signal is not None:
        f.add(
            "stage_failed",
            f"stage command was killed by signal {record.signal}",
            detail=record.stderr_tail[-600:],
            fix="look for memory exhaustion or an external kill",
        )
        return True
    return False


def _no_test_ran(f: Findings, suite: TestSuite) -> None:
    what = (
        "holds no test case"
        if not suite.cases
        else f"holds {len(suite.cases)} test(s) and every one was skipped or disabled"
    )
    f.add(
        "stage_failed",
        f"no test ran: {suite.count('skipped')} skipped, 0 executed",
        detail=f"{suite.source} {what}",
        fix="a run that executes no test verifies nothing: check the selection, markers and "
        "skip conditions (or list the stage in allow_no_tests)",
    )


def _failures_text(case: TestCase) -> str:
    if len(case.failures) <= 1:
        return case.message or case.text[-400:]
    return " ".join(
        f"({i + 1}) {x.message or x.text[-200:]}" + (f" at {x.location}" if x.location else "")
        for i, x in enumerate(case.failures)
    )


def _case_findings(f: Findings, case: TestCase, integration: bool, slow_s: float) -> None:
    if case.outcome in ("failed", "error"):
        kind = "integration_raised" if integration else "test_failed"
        what = "raised" if integration else ("errored" if case.outcome == "error" else "failed")
        tries = f" ({case.attempts} attempts, the worst decides)" if case.attempts > 1 else ""
        f.add(
            kind,
            f"{case.nodeid} {what}{tries}",
            detail=_failures_text(case),
            location=case.location,
            fix=f"fix the code at {case.location}" if case.location else "run the test locally",
        )
    elif case.outcome == "flaky":
        f.add(
            "flaky_test",
            f"{case.nodeid} is flaky: it failed, then passed ({case.attempts} attempts)",
            detail=_failures_text(case),
            location=case.location,
            fix="find what makes it depend on order, timing or state; a re-run hides a bug",
        )
    if case.duration_s > slow_s:
        f.add(
            "slow_test",
            f"{case.nodeid} took {case.duration_s:.1f} s (over {slow_s:g} s)",
            location=case.location,
            fix="shrink its data or mark it slow",
        )


def _suite_findings(f: Findings, suite: TestSuite, stage: str, policy: Policy) -> None:
    if suite.executed == 0 and stage not in policy.allow_no_tests:
        _no_test_ran(f, suite)
    for mismatch in suite.count_mismatches:
        f.add(
            "count_mismatch",
            f"test count mismatch: {mismatch}",
            detail=f"{suite.source}: a file cut off between elements still parses",
            fix="check that the test run wrote the whole file; if the producer counts something "
            "else in tests= (Catch2 v2 counts assertions), set severity.count_mismatch",
        )
    for case in suite.cases:
        _case_findings(f, case, stage == "integration", policy.slow_test_s)
    skipped: dict[str, list[str]] = defaultdict(list)
    for case in suite.cases:
        if case.outcome == "skipped":
            skipped[case.message or "no reason given"].append(case.nodeid)
    for reason, ids in skipped.items():
        f.add("skipped_test", f"{len(ids)} skipped: {reason}", detail=", ".join(ids[:20]))


def _warning_findings(f: Findings, entries: tuple[WarningEntry, ...]) -> None:
    grouped: dict[tuple[str, str, Location], int] = defaultdict(int)
    for w in entries:  # the same warning at the same place is one finding
        grouped[(w.category, " ".join(w.message.split()), w.location)] += w.count
    for (category, message, location), count in grouped.items():
        kind = "deprecation_warning" if category in _DEPRECATIONS else "other_warning"
        f.add(
            kind,
            f"{category}: {message}",
            detail=f"seen {count} time(s)",
            location=location,
            fix="move to the API the warning names",
        )


def _lint_findings(f: Findings, lint: dict[str, list[LintFinding]]) -> None:
    kinds = {"error": "lint_error", "warning": "lint_warning", "style": "lint_style"}
    for tool, items in lint.items():
        for item in items:
            f.add(
                kinds.get(item.level, "lint_warning"),
                f"{tool} {item.code}: {item.message}",
                location=item.location,
                fix=f"fix it, or justify an ignore for {item.code}",
            )


def _side_file_findings(f: Findings, data: StageData) -> None:
    suite = data.suite
    if suite is None:
        why = "the stage wrote no test results either"
    elif suite.count("failed") + suite.count("error") + suite.count("skipped"):
        why = "likely because tests that write it failed or were skipped (see above)"
    else:
        why = "though every test passed: check the code that writes it"
    for missing in data.missing_side_files:
        f.add(
            "side_file_missing",
            f"{missing} was not written",
            detail=why,
            fix="its charts and figures are left out of this report",
        )


def judge_stage(name: str, data: StageData, policy: Policy) -> StageVerdict:
    """Findings, status and score of one stage."""
    required = name in policy.required
    f = Findings(name, policy)
    record = data.record
    note = ""
    skip_allowed = policy.skippable.get(name) == "no-cuda"
    if record is None:
        if skip_allowed:
            status = StageStatus.NOT_VERIFIED
            note = f"{name} did not run here and is allowed to be skipped: NOT VERIFIED"
        else:
            f.add(
                "stage_failed",
                f"{name} has no record: the stage did not run",
                fix=f"run the {name} stage (nox -s verify runs every stage)",
            )
            status = StageStatus.MISSING
        return _finish(name, status, required, f, data, policy, note)
    crashed = _record_findings(f, record)
    for error in data.input_errors:
        f.add(
            "stage_failed",
            f"unreadable output: {error}",
            fix="re-run the stage; if the file is still unreadable, its producer changed format "
            "or crashed while writing it",
        )
    if data.suite is not None:
        _suite_findings(f, data.suite, name, policy)
    _side_file_findings(f, data)
    if data.coverage is not None:
        reason = check_threshold(policy.thresholds["coverage_pct"], data.coverage.percent)
        if reason:
            f.add(
                "coverage_below_floor",
                "coverage below the floor",
                detail=reason,
                fix="test the files with the most missed lines (see Coverage)",
            )
    _warning_findings(f, data.warnings)
    _lint_findings(f, data.lint)
    gpu_unverified = data.benchmark is not None and not data.benchmark.gpu_verified
    if data.benchmark is not None:
        benchmark_findings(f, data.benchmark, policy)
        if gpu_unverified and not skip_allowed:
            f.add(
                "stage_failed",
                "GPU performance is required but was not verified",
                detail=f"the benchmark ran preset {data.benchmark.preset} "
                f"on {data.benchmark.device}",
                fix="run this stage on the self-hosted GPU runner",
            )
    if data.baseline is not None and data.baseline.comparable:
        baseline_findings(f, data.baseline)
    explained = any(x.severity.blocks for x in f.items)
    if record.exit_code not in (0, None) and not explained:
        f.add(
            "stage_failed",
            f"stage command exited {record.exit_code}",
            detail=(record.stderr_tail or record.stdout_tail)[-600:],
            fix="read the stage's output tail below",
        )
    if crashed or data.input_errors:
        status = StageStatus.ERROR
    elif not record.succeeded or any(x.severity.blocks for x in f.items):
        status = StageStatus.FAIL
    elif gpu_unverified and skip_allowed:
        status = StageStatus.NOT_VERIFIED
        note = (
            f"GPU performance was NOT VERIFIED: no CUDA device here, so the benchmark ran "
            f"its {data.benchmark.preset} preset on {data.benchmark.device}; speedup, CUDA "
            "memory and MFU were not checked. What the CPU run measured was judged and met "
            "the policy: finite losses, host syncs in the step, autocast dtypes, live tensors "
            "across steps, accuracy parity between precisions"
        )
    else:
        status = StageStatus.PASS
    return _finish(name, status, required, f, data, policy, note)


def _finish(
    name: str,
    status: StageStatus,
    required: bool,
    f: Findings,
    data: StageData,
    policy: Policy,
    note: str,
) -> StageVerdict:
    findings = tuple(sorted(f.items, key=lambda x: x.severity.rank))
    deductions = tuple(
        Deduction(x.severity, policy.deduction[x.severity], x.title)
        for x in findings
        if policy.deduction[x.severity]
    )
    score = max(0, 100 - sum(d.points for d in deductions))
    skippable = policy.skippable.get(name) == "no-cuda"
    return StageVerdict(name, status, required, score, findings, deductions, data, note, skippable)


def decide(stages: list[StageVerdict]) -> Verdict:
    """BLOCK on any CRITICAL or HIGH finding or any required stage that failed, errored or is
    missing; otherwise PASS. NOT VERIFIED is only ever given to a stage the policy lets skip."""
    reasons: list[str] = []
    for s in stages:
        if s.required and s.status not in (StageStatus.PASS, StageStatus.NOT_VERIFIED):
            reasons.append(f"required stage {s.name} is {s.status.value}")
        elif not s.required and s.status in (StageStatus.FAIL, StageStatus.ERROR):
            reasons.append(f"stage {s.name} is {s.status.value}")
    for s in stages:
        for x in s.findings:
            if x.severity.blocks:
                reasons.append(f"{x.severity.value} in {s.name}: {x.title}")
    fixes = tuple(
        dict.fromkeys(
            f"{x.title}: {x.fix}" for s in stages for x in s.findings if x.severity.blocks and x.fix
        )
    )
    total = sum(d.points for s in stages for d in s.deductions)
    return Verdict(
        "BLOCK" if reasons else "PASS",
        max(0, 100 - total),
        tuple(stages),
        tuple(dict.fromkeys(reasons)),
        fixes,
    )
