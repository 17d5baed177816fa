"""A test recorded more than once in one suite (re-runs, ``go test -count``, parametrized tests
sharing a name): the worst attempt decides, and every failure, attempt and second is kept."""

from __future__ import annotations

import itertools

from stagegate.collect.junit import RANK, merge_attempts
from stagegate.model import Failure, Location, TestCase


def _case(outcome: str, **kw: object) -> TestCase:
    base = {"nodeid": "t.py::x", "file": "t.py", "duration_s": 1.0}
    return TestCase(outcome=outcome, **{**base, **kw})  # type: ignore[arg-type]


def _failed(outcome: str, n: int) -> TestCase:
    failure = Failure("failure", f"boom {n}", text=f"trace {n}", location=Location("a.py", n))
    return _case(outcome, message=f"boom {n}", failures=(failure,), location=Location("a.py", n))


def test_every_attempt_failed_keeps_the_worst_with_all_failures() -> None:
    merged = merge_attempts([_failed("error", 1), _failed("failed", 2)])
    assert (merged.outcome, merged.message, merged.attempts) == ("error", "boom 1", 2)
    assert [f.message for f in merged.failures] == ["boom 1", "boom 2"]
    assert merged.duration_s == 2.0


def test_a_failure_then_a_pass_is_failed_not_flaky() -> None:
    passed = _case("passed", location=Location("t.py", 9))
    for first in (_failed("failed", 1), _failed("error", 1)):
        merged = merge_attempts([first, _failed("failed", 2), passed])
        assert (merged.outcome, merged.attempts, merged.duration_s) == (first.outcome, 3, 3.0)
        assert merged.location in (Location("a.py", 1), Location("a.py", 2))
        assert len(merged.failures) == 2
    # The pass may come first (xdist, parametrized tests sharing a name): still failed.
    merged = merge_attempts([passed, _failed("failed", 5)])
    assert (merged.outcome, merged.message, merged.location) == (
        "failed",
        "boom 5",
        Location("a.py", 5),
    )


def test_repeated_passes_are_one_pass() -> None:
    # pytest-rerunfailures leaves no trace of the failed try: no evidence, no flaky.
    repeated = merge_attempts([_case("passed"), _case("passed", duration_s=2.0)])
    assert (repeated.outcome, repeated.attempts, repeated.duration_s) == ("passed", 2, 3.0)
    assert repeated.failures == ()


def test_a_documented_rerun_stays_flaky_unless_another_attempt_failed() -> None:
    flaky = _case("flaky", attempts=2, failures=(Failure("failure", "f"),))
    merged = merge_attempts([_case("passed"), flaky])
    assert (merged.outcome, merged.attempts) == ("flaky", 3)
    worse = merge_attempts([flaky, _failed("failed", 1)])
    assert (worse.outcome, worse.attempts, len(worse.failures)) == ("failed", 3, 2)


def test_skipped_attempts_count_only_when_nothing_ran() -> None:
    merged = merge_attempts([_case("skipped"), _failed("failed", 1)])
    assert (merged.outcome, merged.attempts) == ("failed", 2)
    skipped = merge_attempts([_case("skipped", message="a"), _case("skipped", message="b")])
    assert (skipped.outcome, skipped.message, skipped.attempts) == ("skipped", "b", 2)
    assert merge_attempts([_case("passed"), _case("skipped")]).outcome == "passed"


def test_the_worst_outcome_wins_in_any_order() -> None:
    outcomes = ("passed", "flaky", "failed", "error", "skipped")
    for pair in itertools.permutations(outcomes, 2):
        merged = merge_attempts([_case(o) for o in pair])
        assert merged.outcome == max(pair, key=RANK.__getitem__)
    assert sorted(RANK, key=RANK.__getitem__) == ["skipped", "passed", "flaky", "failed", "error"]
