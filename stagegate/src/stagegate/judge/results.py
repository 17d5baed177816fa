"""Findings from what a stage's files say: tests, required tests, coverage, warnings, lint, and
the files it declared (judge/outputs.py).

Each check is a hook with one signature; :data:`RESULT_CHECKS` runs them in report order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from stagegate.judge.findings import Findings
from stagegate.judge.outputs import output_findings
from stagegate.judge.policy import Policy, check_threshold
from stagegate.judge.required import (
    gone_findings,
    required_test_findings,
    run_nowhere_findings,
    skipped_share_findings,
)
from stagegate.kinds import Kind
from stagegate.model import (
    FileCoverage,
    LintFinding,
    Location,
    StageData,
    TestCase,
    TestSuite,
    WarningEntry,
)

_DEPRECATIONS = ("DeprecationWarning", "PendingDeprecationWarning", "FutureWarning")


def _no_test_ran(f: Findings, suite: TestSuite) -> None:
    what = (
        "holds no test case"
        if not suite.cases
        else f"holds {len(suite.cases)} test(s) and every one was skipped or disabled"
    )
    f.add(
        Kind.STAGE_FAILED,
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
        kind = Kind.INTEGRATION_RAISED if integration else Kind.TEST_FAILED
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
            Kind.FLAKY_TEST,
            f"{case.nodeid} is flaky: it failed, then passed ({case.attempts} attempts)",
            detail=_failures_text(case),
            location=case.location,
            fix="find what makes it depend on order, timing or state; a re-run hides a bug",
        )
    if case.duration_s > slow_s:  # INFO only: the policy refuses to score it
        f.add(
            Kind.SLOW_TEST,
            f"{case.nodeid} took {case.duration_s:.1f} s (over {slow_s:g} s)",
            location=case.location,
            fix="shrink its data or mark it slow",
        )


_REWRITTEN = (
    "stagegate's pytest plugin saw it raise, outside pytest's reports: something in the test "
    "process rewrote its report"
)


def _witness_findings(f: Findings, suite: TestSuite, policy: Policy) -> None:
    """A pytest file's outcomes held against what stagegate's plugin saw raise."""
    for nodeid in suite.contradicted:
        f.add(
            Kind.OUTCOME_CONTRADICTED,
            f"{nodeid} raised, and {suite.source} says it did not fail",
            detail=_REWRITTEN,
            fix="the test fails: find the code that patches pytest's reports or hooks "
            "(TestReport, pytest_runtest_makereport) and remove it",
        )
    for name in suite.unreported:
        f.add(
            Kind.OUTCOME_CONTRADICTED,
            f"{name} raised, and {suite.source} does not hold it",
            detail=_REWRITTEN,
            fix="the test fails: find the code that drops pytest's reports and remove it",
        )
    for hook in suite.foreign_hooks:
        f.add(
            Kind.FOREIGN_HOOKS,
            f"pytest's running or reporting of tests was hooked: {hook}",
            detail="registered once tests were collected, by a test module or code it imports "
            "(not a conftest.py), or pytest's own function replaced: it can pass, skip or drop "
            "tests without their failures reaching stagegate's witness",
            fix="move the hook into a conftest.py (a gate file) or remove it",
        )
    for nodeid, where in suite.skipped_by_code:
        if policy.is_test_code(where.file):
            continue
        f.add(
            Kind.SKIPPED_BY_CODE_UNDER_TEST,
            f"{nodeid} was skipped by {where}, code it tests",
            detail="pytest.skip, pytest.xfail or SkipTest raised outside the tests and "
            "conftest files: the code under test decided its own test does not count",
            location=where,
            fix="decide skips in the test or a conftest.py (a helper of the tests elsewhere: "
            "name it in [tool.stagegate] test_code); if the code fails here, fix it",
        )
    if suite.witnessed is False:
        f.add(
            Kind.OUTCOMES_UNWITNESSED,
            "no witness of which tests raised",
            detail=f"{suite.source} is pytest's, and stagegate's pytest plugin wrote no "
            "witness beside it (or an older plugin's, without the tests that raised or those it "
            "dropped): its outcomes are claims",
            fix="install stagegate where pytest runs (its plugin loads by itself) and do not "
            "disable it (-p no:stagegate_warnings)",
        )


def suite_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """Tests that failed, errored, were flaky, slow or skipped; a file that lost tests; none run."""
    suite = data.suite
    if suite is None:
        return
    # A stage the policy lets skip without CUDA (the cuda-marked tests) is NOT VERIFIED when
    # every test skipped; required (no longer skippable), it must run some.
    skippable = policy.skippable.get(stage) == "no-cuda"
    if suite.executed == 0 and stage not in policy.allow_no_tests and not skippable:
        _no_test_ran(f, suite)
    unwitnessed = (  # pytest's tests= counts subtests it writes no element for
        "; pytest counts subtests in tests=: install stagegate where pytest runs (its plugin "
        "counts them)"
        if suite.witnessed is False
        else ""
    )
    for mismatch in suite.count_mismatches:
        f.add(
            Kind.COUNT_MISMATCH,
            f"test count mismatch: {mismatch}",
            detail=f"{suite.source}: a file cut off between elements still parses",
            fix="check that the test run wrote the whole file; if the producer counts something "
            "else in tests= (Catch2 v2 counts assertions), set severity.count_mismatch"
            + unwitnessed,
        )
    _witness_findings(f, suite, policy)
    for case in suite.cases:
        _case_findings(f, case, stage == "integration", policy.slow_test_s)
    skipped: dict[str, list[str]] = defaultdict(list)
    for case in suite.cases:
        if case.outcome == "skipped":
            skipped[case.message or "no reason given"].append(case.nodeid)
    for reason, ids in skipped.items():
        f.add(Kind.SKIPPED_TEST, f"{len(ids)} skipped: {reason}", detail=", ".join(ids[:20]))


def coverage_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """Coverage under the policy's floor."""
    if data.coverage is None:
        return
    reason = check_threshold(policy.thresholds["coverage_pct"], data.coverage.percent)
    if reason:
        f.add(
            Kind.COVERAGE_BELOW_FLOOR,
            "coverage below the floor",
            detail=reason,
            fix="test the files with the most missed lines (see Coverage)",
        )


def narrowed_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """Each file the change leaves as it is whose lines and branches coverage counts fewer
    than on the base (or none): the same source measured less is a configuration (omit,
    exclusions) or a file that says less than coverage measured. Files are named as coverage
    names them, relative to where it ran or absolute: two names of one file end alike."""
    if data.coverage is None or data.base_coverage is None or data.changed is None:
        return
    changed: dict[str, list[tuple[str, ...]]] = defaultdict(list)  # by the file's name
    now: dict[str, list[tuple[tuple[str, ...], int]]] = defaultdict(list)
    for parts in filter(None, map(_parts, data.changed)):
        changed[parts[-1]].append(parts)
    for file in data.coverage.files:
        if parts := _parts(file.path):
            now[parts[-1]].append((parts, _measured(file)))
    for base in data.base_coverage.files:
        was, parts = _measured(base), _parts(base.path)
        if not was or any(_same(parts, c, whole=True) for c in changed[parts[-1]]):
            continue  # counted nothing, or touched (wherever the list's names start)
        counted = _counted(parts, now[parts[-1]])
        if counted is not None and counted >= was:
            continue
        less = (
            f"measured for {counted} of the base's {was} lines and branches"
            if counted is not None
            else "no longer measured"
        )
        f.add(
            Kind.COVERAGE_NARROWED,
            f"{base.path}, which the change leaves as it is, is {less}",
            location=Location(base.path),
            fix="measure what the base measured (coverage's source, omit and exclusions); "
            "where less is meant, set [tool.stagegate.severity] coverage_narrowed",
        )


def _parts(name: str) -> tuple[str, ...]:
    return tuple(p for p in name.replace("\\", "/").split("/") if p not in ("", "."))


def _same(a: tuple[str, ...], b: tuple[str, ...], whole: bool = False) -> bool:
    """Whether ``a`` and ``b`` name one file: the shorter is the end of the longer, or (not
    ``whole``: absolute paths of two checkouts) they end in the same folder and name."""
    shorter = min(len(a), len(b))
    ending = next((i for i in range(shorter) if a[-1 - i] != b[-1 - i]), shorter)
    return ending == shorter or (not whole and ending >= 2)


def _counted(parts: tuple[str, ...], files: list[tuple[tuple[str, ...], int]]) -> int | None:
    """What coverage counts in the file named ``parts`` among ``files`` (named alike by the
    whole of the shorter name where one is, else by their ends); None where none is it."""
    whole = [n for p, n in files if _same(parts, p, whole=True)]
    return max(whole or [n for p, n in files if _same(parts, p)], default=None)


def _measured(c: FileCoverage) -> int:
    """How many lines and branches coverage counts in a file (0: not stated)."""
    return c.counts[1] if c.counts is not None else 0


def warning_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """Each captured warning once per place, deprecations apart from the rest."""
    grouped: dict[tuple[str, str, Location], int] = defaultdict(int)
    entries: tuple[WarningEntry, ...] = data.warnings
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


def lint_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """Every linter finding, its kind from its level; a level no reader writes (a generic
    file's "ERROR" or "fatal") counts as an error: what the gate cannot place, it does not pass."""
    kinds = {"error": Kind.LINT_ERROR, "warning": Kind.LINT_WARNING, "style": Kind.LINT_STYLE}
    lint: dict[str, list[LintFinding]] = data.lint
    for tool, items in lint.items():
        for item in items:
            f.add(
                kinds.get(item.level, Kind.LINT_ERROR),
                f"{tool} {item.code}: {item.message}",
                location=item.location,
                fix=f"fix it, or justify an ignore for {item.code}",
            )


ResultCheck = Callable[[Findings, StageData, str, Policy], None]
RESULT_CHECKS: tuple[ResultCheck, ...] = (
    suite_findings,
    required_test_findings,
    skipped_share_findings,
    gone_findings,
    run_nowhere_findings,
    output_findings,
    coverage_findings,
    narrowed_findings,
    warning_findings,
    lint_findings,
)
