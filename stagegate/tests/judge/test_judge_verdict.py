"""Scores and the decision over every stage: typed, reasons and fixes listed, and the same for
the same inputs whatever the machine's load was."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import Decision, Location, Severity, StageData, StageStatus, StageVerdict

from ..builders import case, record, suite

POLICY = Policy()


def test_the_decision_lists_reasons_and_fixes_and_sums_deductions() -> None:
    a = judge_stage(
        "execution",
        StageData(
            record(exit_code=1), suite=suite(case("b", "failed", location=Location("t.py", 1)))
        ),
        POLICY,
    )
    b = judge_stage("static", StageData(record("static")), POLICY)
    d = decide([a, b])
    assert d.decision is Decision.BLOCK and d.score == 60
    assert "execution" in d.blocking_reasons[0] and "FAIL" in d.blocking_reasons[0]
    assert any("tests/t.py::b" in r for r in d.blocking_reasons)
    assert d.required_fixes and all("t.py:1" in f for f in d.required_fixes)
    assert decide([b]).decision is Decision.PASS and decide([b]).score == 100
    assert a.blocking == a.findings and Severity.CRITICAL.blocks and not Severity.MEDIUM.blocks


def test_a_finding_that_does_not_block_costs_points_but_passes() -> None:
    flaky = suite(case("a"), case("b", "flaky", attempts=2))
    v = judge_stage("execution", StageData(record(), suite=flaky), POLICY)
    assert v.status is StageStatus.PASS and v.score == 95 and v.blocking == ()
    assert [d.points for d in v.deductions] == [5]
    assert decide([v]).decision is Decision.PASS and decide([v]).required_fixes == ()


def _verdict(name: str, status: StageStatus, required: bool) -> StageVerdict:
    return StageVerdict(
        name=name, status=status, required=required, score=100, findings=(), deductions=(),
        data=StageData(record(name)),
    )  # fmt: skip


def test_a_stage_that_is_not_required_still_blocks_when_it_fails() -> None:
    passing = [_verdict("static", StageStatus.PASS, True)]
    assert (
        decide([*passing, _verdict("performance", StageStatus.PASS, False)]).decision
        is Decision.PASS
    )
    not_verified = _verdict("performance", StageStatus.NOT_VERIFIED, False)
    assert decide([*passing, not_verified]).decision is Decision.PASS
    for status in (StageStatus.FAIL, StageStatus.ERROR):
        verdict = decide([*passing, _verdict("performance", status, False)])
        assert verdict.decision is Decision.BLOCK
        assert len(verdict.blocking_reasons) == 1 and status.value in verdict.blocking_reasons[0]


@pytest.mark.parametrize("failing", [False, True])
def test_the_same_results_get_the_same_verdict_however_long_the_tests_took(failing: bool) -> None:
    """Durations depend on the machine's load; the decision and the score must not."""
    cases = (
        case("a", duration_s=0.01),
        case("b", "failed" if failing else "passed", duration_s=0.5),
    )
    # the stage's run holds its tests however long they took
    quiet = StageData(record(exit_code=int(failing), duration_s=600.0), suite=suite(*cases))
    busy = replace(quiet, suite=suite(*(replace(c, duration_s=c.duration_s * 1000) for c in cases)))
    verdicts = [decide([judge_stage("execution", d, POLICY)]) for d in (quiet, busy)]
    assert {v.decision for v in verdicts} == {Decision.BLOCK if failing else Decision.PASS}
    assert verdicts[0].score == verdicts[1].score
    assert verdicts[0].stages[0].status is verdicts[1].stages[0].status
