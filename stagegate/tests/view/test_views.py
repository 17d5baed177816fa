"""Stage and summary views: they show the judge's statuses, score and blocking findings, and
decide nothing of their own."""

from __future__ import annotations

from dataclasses import replace

from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import Decision, Location, StageData
from stagegate.view.parts import Context
from stagegate.view.stage import stage_view
from stagegate.view.summary import summary_view

from ..builders import REPO_POLICY, case, cpu_bench, performance, record, suite

POLICY = Policy()
CTX = Context("2026-01-01 00:00:00 UTC", "0123456789ab", "main", ("M a.py",), "reports/raw")


def _failing() -> StageData:
    failed = case("b", "failed", message="boom", location=Location("t.py", 3))
    return StageData(record(exit_code=1), suite=suite(case("a"), failed))


def _section(view, title: str):
    return next(s for s in view.sections if s.title == title)


def test_the_summary_shows_the_judges_decision_score_and_reasons() -> None:
    verdict = decide([judge_stage("execution", _failing(), POLICY)])
    view = summary_view(verdict, CTX)
    assert verdict.decision is Decision.BLOCK and view.decision == "BLOCK"
    assert view.score == verdict.score == 60
    assert any("tests/t.py::b" in r for r in view.blocking_reasons)
    assert len(view.required_fixes) == len(verdict.required_fixes) == 1
    (row,) = view.stages.rows
    assert "FAIL" in row[1] and row[3] == "60" and "1 failed" in row[-2]


def test_the_recommendation_lists_the_findings_the_judge_said_block() -> None:
    stage = judge_stage("execution", _failing(), POLICY)
    shown = "\n".join(_section(stage_view(stage, CTX), "Recommendation").paragraphs)
    assert "BLOCK" in shown and "t.py:3" in shown
    # the same findings, none of them blocking by the judge's word: no fix is listed
    unblocked = "\n".join(
        _section(stage_view(replace(stage, blocking=()), CTX), "Recommendation").paragraphs
    )
    assert "t.py:3" not in unblocked


def test_a_not_verified_stage_carries_the_judges_note_as_its_banner() -> None:
    stage = judge_stage("performance", performance(cpu_bench()), REPO_POLICY)
    view = stage_view(stage, CTX)
    assert (
        view.summary.rows[0] == ("Decision", "**NOT VERIFIED**") and "NOT VERIFIED" in view.banner
    )
    assert summary_view(decide([stage]), CTX).banners == (view.banner,)


def test_the_score_breakdown_is_the_judges_deductions() -> None:
    flaky = StageData(record(), suite=suite(case("a"), case("b", "flaky", attempts=2)))
    stage = judge_stage("execution", flaky, POLICY)
    breakdown = _section(stage_view(stage, CTX), "Score Breakdown")
    (table,) = breakdown.tables
    assert [r[1] for r in table.rows] == [f"-{d.points}" for d in stage.deductions] == ["-5"]
    assert "95/100" in breakdown.paragraphs[0]
    summary = summary_view(decide([stage]), CTX)
    assert summary.decision == "PASS" and summary.flaky and "tests/t.py::b" in summary.flaky[0]


def _outcomes(**witness: object) -> str | None:
    """The stage report's Outcomes fact for a pytest suite with ``witness``; None: no row."""
    data = StageData(record(), suite=suite(case("a"), **witness))
    view = stage_view(judge_stage("execution", data, POLICY), CTX)
    rows = [r for s in view.sections for t in s.tables for r in t.rows if r[0] == "Outcomes"]
    return rows[0][1] if rows else None


def test_the_report_says_whether_outcomes_were_witnessed_or_only_claimed() -> None:
    assert _outcomes() is None  # not pytest's, or no witness expected
    assert _outcomes(witnessed=True) == "witnessed by stagegate's pytest plugin"
    dropped = _outcomes(witnessed=True, deselected=("tests/t.py::b",), empty_files=("x.py",))
    assert dropped == "witnessed by stagegate's pytest plugin; 2 collected and not run here"
    assert _outcomes(witnessed=False) is not None
    assert "witnessed" not in str(_outcomes(witnessed=False))
