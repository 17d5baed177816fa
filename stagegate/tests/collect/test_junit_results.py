"""What the judge says of the tests a JUnit file holds (judge/results.py): each failure of a
test is listed once, with its place only where it has one; a run that ran no test says which
of its two kinds it is."""

from __future__ import annotations

from stagegate.judge import judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import Failure, Location, StageData

from ..builders import case, record, suite


def _findings(*cases: object) -> dict:
    data = StageData(record(), suite=suite(*cases))  # type: ignore[arg-type]
    return {f.title.split(" ")[0]: f for f in judge_stage("execution", data, Policy()).findings}


def test_a_failure_without_a_place_is_listed_without_one() -> None:
    failures = (
        Failure("failure", "first", location=Location("a.py", 3)),
        Failure("failure", "second"),
        Failure("failure", "third", location=Location("b.py", 8)),
    )
    detail = _findings(case("t", "failed", failures=failures))["tests/t.py::t"].detail
    assert detail.index("first") < detail.index("a.py:3") < detail.index("second")
    assert detail.index("second") < detail.index("third") < detail.index("b.py:8")
    between = detail[detail.index("second") + len("second") : detail.index("(3)")]
    assert between.strip() == ""  # nothing names a place for the failure that has none
    assert "None" not in detail and detail.endswith("b.py:8")


def test_no_test_ran_says_whether_there_were_none_or_all_skipped() -> None:
    empty = _findings()["no"]
    assert "junit.xml" in empty.detail and "skipped" not in empty.detail
    skipped = _findings(case("a", "skipped"), case("b", "skipped"))["no"]
    assert "2 test" in skipped.detail and "skipped" in skipped.detail
