"""The tests the policy requires, the tests the base branch ran that are skipped or gone here,
and the tests a stage dropped that no stage ran.

A required test is named by a node id or a pattern (``*`` matches anything, brackets are
literal): ``tests/integration/test_fine_tuning_cpu.py::*``. It must run and pass: one that
matches nothing, is skipped, or ran on the base branch and is gone here (deselected, removed or
renamed) is a blocking finding that names it. Failures are already ``test_failed``.
"""

from __future__ import annotations

import re
from functools import cache

from stagegate.judge.findings import Findings
from stagegate.judge.policy import Policy
from stagegate.kinds import Kind
from stagegate.model import StageData, TestCase, TestSuite

_LISTED = 20  # tests named in one finding's detail; the stage report lists every one
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def canonical(case: TestCase) -> str:
    """``path.py::Class::name`` for a pytest case named by its dotted classname (the file was
    not in the checkout where the report ran), else the node id as read."""
    return canonical_id(case.nodeid)


def canonical_id(nodeid: str) -> str:
    """:func:`canonical` of a node id."""
    head, sep, name = nodeid.partition("::")
    if not sep or head.endswith(".py") or not _DOTTED.fullmatch(head):
        return nodeid
    parts = head.split(".")
    split = len(parts)
    while split > 1 and parts[split - 1][:1].isupper():
        split -= 1
    return "::".join(["/".join(parts[:split]) + ".py", *parts[split:], name])


def matches(pattern: str, case: TestCase) -> bool:
    """Whether ``case`` is named by ``pattern``, as read or in its file form."""
    return named_by(pattern, case.nodeid)


def named_by(pattern: str, nodeid: str) -> bool:
    """Whether ``nodeid`` is named by ``pattern``, as read or in its file form."""
    regex = _regex(pattern)
    return any(regex.fullmatch(i) for i in {nodeid, canonical_id(nodeid)})


def _listed(cases: list[TestCase]) -> str:
    shown = "; ".join(f"{c.nodeid} ({c.message or 'no reason given'})" for c in cases[:_LISTED])
    more = len(cases) - _LISTED
    return shown + (f"; and {more} more (see the stage report)" if more > 0 else "")


def _gone_since_base(
    f: Findings, data: StageData, suite: TestSuite, base: TestSuite, patterns: tuple[str, ...]
) -> None:
    here = {canonical(c) for c in suite.cases} | data.executed_elsewhere  # moved: ran there
    gone = [c for c in base.cases if c.executed and canonical(c) not in here]
    for case in (c for c in gone if any(matches(p, c) for p in patterns)):
        f.add(
            Kind.REQUIRED_TEST_MISSING,
            f"required test {case.nodeid} ran on the base branch and did not run here",
            detail="deselected, removed or renamed: the policy requires it to run",
            fix="run it again; a test the policy requires is not dropped by a change",
        )


def required_test_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """Every required test that matched nothing, was skipped, or is gone since the base."""
    patterns = policy.required_tests.get(stage, ())
    if not patterns or data.suite is None:
        if patterns and data.record is not None:
            f.add(
                Kind.REQUIRED_TEST_MISSING,
                f"the tests {stage} must run cannot be checked: it left no test results",
                detail=", ".join(patterns),
                fix="make the stage write its JUnit file",
            )
        return
    suite = data.suite
    for pattern in patterns:
        found = [c for c in suite.cases if matches(pattern, c)]
        if not found:
            f.add(
                Kind.REQUIRED_TEST_MISSING,
                f"required test {pattern} did not run: no test in the results matches it",
                detail=f"{suite.source}: missing, deselected or renamed",
                fix="run it; the policy names the tests this stage exists to run",
            )
        for case in (c for c in found if c.outcome == "skipped"):
            f.add(
                Kind.REQUIRED_TEST_SKIPPED,
                f"required test {case.nodeid} was skipped",
                detail=case.message or "no reason given",
                location=case.location,
                fix="remove the skip: the policy requires this test to run and pass",
            )
    if data.base_suite is not None:
        _gone_since_base(f, data, suite, data.base_suite, patterns)


def gone_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """Tests that ran on the base branch and are absent here (deselected, removed or renamed),
    in one finding that names them; those the policy requires are ``required_test_missing``."""
    suite, base = data.suite, data.base_suite
    if suite is None or base is None:
        return
    here = {canonical(c) for c in suite.cases} | data.executed_elsewhere  # moved: ran there
    required = policy.required_tests.get(stage, ())
    gone = [
        c
        for c in base.cases
        if c.executed and canonical(c) not in here and not any(matches(p, c) for p in required)
    ]
    if gone:
        f.add(
            Kind.TEST_GONE,
            f"{len(gone)} test(s) that ran on the base branch did not run here",
            detail="; ".join(c.nodeid for c in gone[:_LISTED])
            + (f"; and {len(gone) - _LISTED} more" if len(gone) > _LISTED else ""),
            fix="deselected, removed or renamed: run them, or say in the change why each is "
            "gone (a deselection in a conftest.py, pytest.ini or the stage's command hides it)",
        )


def _share(suite: TestSuite) -> float:
    return 100.0 * suite.count("skipped") / len(suite.cases) if suite.cases else 0.0


def skipped_share_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """Tests that ran on the base branch and skip here, named whether or not the skipped share
    rose (tests added beside them can hold the share down); and a share that rose, new tests
    that skip included."""
    suite, base, spec = data.suite, data.base_suite, policy.stages.get(stage)
    # a test that ran in another stage on the base branch and was moved here (not into a stage
    # that re-runs others' tests or may skip what needs a GPU: there it skips by design)
    moved = data.base_ran_elsewhere if spec is None or not (spec.subset or spec.skippable) else ()
    if base is None and moved:  # a stage new since the base: its tests moved
        base = TestSuite(cases=(), source="the base branch's other stages")
    if suite is None or base is None:
        return
    skipped_before = {canonical(c) for c in base.cases if c.outcome == "skipped"}
    ran_before = {canonical(c) for c in base.cases if c.executed} | set(moved)
    newly = [
        c for c in suite.cases if c.outcome == "skipped" and canonical(c) not in skipped_before
    ]
    if not newly:
        return
    before, now = _share(base), _share(suite)
    share = f"the skipped share went from {before:.1f}% to {now:.1f}%"
    stopped = [c for c in newly if canonical(c) in ran_before]
    if stopped:
        f.add(
            Kind.TEST_NEWLY_SKIPPED,
            f"{len(stopped)} test(s) that ran on the base branch skip here ({share})",
            detail=_listed(stopped),
            fix="run them, or say in the change why each is skipped now (a maintainer may "
            "accept it: set severity.test_newly_skipped for that change)",
        )
    if data.base_suite is not None and now - before > policy.skip_jump_pct:
        f.add(
            Kind.SKIPPED_SHARE_ROSE,
            f"skipped share rose from {before:.1f}% to {now:.1f}% against the base branch: "
            f"{len(newly)} test(s) newly skipped",
            detail=_listed(newly),
            fix="run them, or say in the change why each is skipped now",
        )


def _ran_in(entry: str, elsewhere: frozenset[str]) -> bool:
    """Whether ``elsewhere`` holds ``entry`` (a test file, class or function) or a test in it."""
    return entry in elsewhere or any(t.startswith((f"{entry}::", f"{entry}[")) for t in elsewhere)


def _names(named: list[str]) -> str:
    more = len(named) - _LISTED
    return "; ".join(named[:_LISTED]) + (f"; and {more} more" if more > 0 else "")


def _not_run_listed(f: Findings, stage: str, named: list[str]) -> None:
    """The dropped tests no stage ran that the policy's not_run excuses, shown, never hidden."""
    if named:
        f.add(
            Kind.TEST_NOT_RUN_BY_POLICY,
            f"{len(named)} test(s) that {stage} dropped run in no stage, as not_run allows",
            detail=_names(named),
            fix="nothing, if the policy's [tool.stagegate] not_run still means them",
        )


def _left_to_stages(
    f: Findings, data: StageData, suite: TestSuite, stage: str, policy: Policy, dropped: list[str]
) -> list[str]:
    """``dropped`` less the tests pytest deselected that carry the mark of a declared stage
    with no record here (``marker``): they wait for that stage, which the summary shows NOT
    VERIFIED (or missing, where it is required); listed, never hidden."""
    waiting = {
        spec.marker: name
        for name, spec in policy.stages.items()
        if spec.marker and name != stage and name not in data.recorded
    }
    marks = dict(suite.deselected_marks)
    left: dict[str, list[str]] = {}
    for test in dropped:
        owner = next((waiting[m] for m in marks.get(test, ()) if m in waiting), None)
        if owner is not None:
            left.setdefault(owner, []).append(test)
    for owner, tests in left.items():
        f.add(
            Kind.TEST_LEFT_TO_STAGE,
            f"{len(tests)} test(s) that {stage} dropped are marked "
            f"{policy.stages[owner].marker}: they run in the {owner} stage, which did not run "
            "here",
            detail=_names(tests),
            fix=f"run the {owner} stage before the report to verify them here",
        )
    held = {t for tests in left.values() for t in tests}
    return [t for t in dropped if t not in held]


def run_nowhere_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """The tests this stage collected and did not run (dropped by ``-m``, ``-k``,
    ``--deselect`` or a hook; kept and never started), and the test files, classes and
    functions that yielded no test, that no other stage of the report ran: a test marked for a
    stage that does not collect it runs nowhere. A stage declared ``subset`` is not looked at."""
    suite, spec = data.suite, policy.stages.get(stage)
    if suite is None or (spec is not None and spec.subset):
        return
    elsewhere = data.ran_elsewhere
    dropped = [t for t in suite.deselected if canonical_id(t) not in elsewhere]
    dropped = _left_to_stages(f, data, suite, stage, policy, dropped)
    empty = [e for e in suite.empty_files if not _ran_in(e, elsewhere)]
    excused = [t for t in [*dropped, *empty] if any(named_by(p, t) for p in policy.not_run)]
    _not_run_listed(f, stage, excused)
    policy_says = set(excused)
    dropped = [t for t in dropped if t not in policy_says]
    empty = [e for e in empty if e not in policy_says]
    if not dropped and not empty:
        return
    named = [*dropped, *(f"{e} (named as a test, it yielded none)" for e in empty)]
    shown = _names(named)
    f.add(
        Kind.TEST_RUN_NOWHERE,
        f"{len(named)} test(s) that {stage} dropped ran in no stage",
        detail=shown,
        fix="run each in a stage (a mark, -m, -k, --deselect, __test__ = False or a run cut "
        "short kept it from running here), or name the ones no stage runs on purpose in "
        "[tool.stagegate] not_run",
    )
