"""The data model's own rules: severities and what blocks, counts over a suite and a verdict."""

from __future__ import annotations

import pytest

from stagegate.model import (
    Decision,
    Location,
    Severity,
    StageData,
    StageStatus,
    StageVerdict,
    TestSuite,
)

from .builders import case, record


def test_severities_sort_most_severe_first_and_only_critical_and_high_block() -> None:
    assert sorted(Severity, key=lambda s: s.rank) == list(Severity)
    assert [s for s in Severity if s.blocks] == [Severity.CRITICAL, Severity.HIGH]


def test_a_suite_counts_its_outcomes_and_what_ran() -> None:
    tests = TestSuite(
        cases=(case("a"), case("b", "failed"), case("c", "skipped"), case("d", "flaky")),
        source="j.xml",
    )
    assert [tests.count(o) for o in ("passed", "failed", "skipped", "flaky")] == [1, 1, 1, 1]
    assert tests.executed == 3 and tests.duration_s == 0.04


def test_a_record_succeeded_only_when_its_command_ended_with_0() -> None:
    assert record().succeeded
    assert not record(exit_code=1).succeeded
    assert not record(timed_out=True).succeeded and not record(error="x").succeeded


def test_decisions_and_statuses_are_enums_with_the_words_reports_print() -> None:
    assert [d.value for d in Decision] == ["PASS", "BLOCK"]
    assert StageStatus.NOT_VERIFIED.value == "NOT VERIFIED"
    stage = StageVerdict(
        name="x", status=StageStatus.PASS, required=True, score=100, findings=(),
        deductions=(), data=StageData(None),
    )  # fmt: skip
    assert stage.count(Severity.HIGH) == 0 and stage.blocking == ()


@pytest.mark.parametrize(
    ("text", "location"),
    [
        ("src/m.py:12", Location("src/m.py", 12)),
        ("src/m.py", Location("src/m.py")),
        ("src/m.py:²", Location("src/m.py:²")),  # a digit int() does not read: no line
        (":12", Location(":12")),
    ],
)
def test_a_location_written_as_text_is_read_as_file_and_line(text: str, location: Location) -> None:
    assert Location.parse(text) == location
