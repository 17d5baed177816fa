"""A test recorded more than once in one file (re-runs, ``go test -count``): which outcome,
failures, attempt count, duration and place the merged case keeps."""

from __future__ import annotations

from stagegate.collect.junit import merge_attempts
from stagegate.model import Failure, Location, TestCase


def _case(outcome: str, **kw: object) -> TestCase:
    base = {"nodeid": "t.py::x", "file": "t.py", "name": "x", "duration_s": 1.0}
    return TestCase(outcome=outcome, **{**base, **kw})  # type: ignore[arg-type]


def _failed(outcome: str, n: int) -> TestCase:
    failure = Failure("failure", f"boom {n}", text=f"trace {n}", location=Location("a.py", n))
    return _case(outcome, message=f"boom {n}", failures=(failure,), location=Location("a.py", n))


def test_every_attempt_failed_keeps_the_last_with_all_failures() -> None:
    merged = merge_attempts([_failed("failed", 1), _failed("error", 2)], pytest=False)
    assert (merged.outcome, merged.message, merged.attempts) == ("error", "boom 2", 2)
    assert [f.message for f in merged.failures] == ["boom 1", "boom 2"]
    assert merged.duration_s == 2.0


def test_failed_then_passed_is_flaky_with_the_first_failure() -> None:
    passed = _case("passed", location=Location("t.py", 9))
    for first in (_failed("failed", 1), _failed("error", 1)):
        merged = merge_attempts([first, _failed("failed", 2), passed], pytest=False)
        assert (merged.outcome, merged.attempts, merged.duration_s) == ("flaky", 3, 3.0)
        assert (merged.message, merged.text, merged.location) == (
            "boom 1",
            "trace 1",
            Location("a.py", 1),
        )
        assert len(merged.failures) == 2


def test_a_pytest_rerun_without_a_failure_left_is_still_flaky() -> None:
    passed = _case("passed", location=Location("t.py", 9))
    merged = merge_attempts([_case("passed"), passed], pytest=True)
    assert merged.outcome == "flaky"
    assert merged.message == "re-run after a failure the file does not hold"
    assert (merged.text, merged.location) == ("", Location("t.py", 9))
    # Other producers repeat passing tests on purpose (go test -count): that is a pass.
    repeated = merge_attempts([_case("passed"), _case("passed", duration_s=2.0)], pytest=False)
    assert (repeated.outcome, repeated.attempts, repeated.duration_s) == ("passed", 2, 3.0)


def test_an_attempt_already_flaky_stays_flaky() -> None:
    merged = merge_attempts([_case("passed"), _case("flaky", attempts=2)], pytest=False)
    assert (merged.outcome, merged.attempts) == ("flaky", 3)


def test_skipped_attempts_count_only_when_nothing_ran() -> None:
    merged = merge_attempts([_case("skipped"), _failed("failed", 1)], pytest=False)
    assert (merged.outcome, merged.attempts) == ("failed", 2)
    skipped = merge_attempts([_case("skipped", message="a"), _case("skipped", message="b")], False)
    assert (skipped.outcome, skipped.message, skipped.attempts) == ("skipped", "b", 2)
