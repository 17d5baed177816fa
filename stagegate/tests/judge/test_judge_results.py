"""Findings from what a stage's files say: tests, skips, warnings, coverage, lint, side files."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stagegate.judge import judge_stage
from stagegate.judge.policy import Policy, check_threshold
from stagegate.model import (
    Coverage,
    Failure,
    FileCoverage,
    LintFinding,
    Location,
    MissingFile,
    StageData,
    StageStatus,
    WarningEntry,
)

from ..builders import case, record, suite

POLICY = Policy()


def kinds(verdict) -> list[tuple[str, str]]:
    return [(f.severity.value, f.kind) for f in verdict.findings]


def _found(name: str, data: StageData, policy: Policy = POLICY) -> dict:
    return {f.title: f for f in judge_stage(name, data, policy).findings}


@pytest.mark.parametrize("outcome", ["failed", "error"])
@pytest.mark.parametrize("exit_code", [1, 0])  # the runner's word never outweighs the file
def test_a_failed_or_errored_test_is_critical_with_its_location(
    outcome: str, exit_code: int
) -> None:
    failed = case("b", outcome, message="assert 1 == 2", location=Location("tests/t.py", 7))
    v = judge_stage(
        "execution", StageData(record(exit_code=exit_code), suite=suite(case("a"), failed)), POLICY
    )
    assert v.status is StageStatus.FAIL and kinds(v) == [("CRITICAL", "test_failed")]
    (finding,) = v.findings
    assert finding.location == Location("tests/t.py", 7) and v.score == 60
    assert "tests/t.py::b" in finding.title and "assert 1 == 2" in finding.detail
    assert "tests/t.py:7" in finding.fix


def test_integration_raising_is_reported_with_the_raising_line() -> None:
    raised = case(
        "test_fine_tuning",
        "failed",
        message="KeyError: 'train_data'",
        location=Location("src/amptrain/legacy.py", 80),
    )
    v = judge_stage(
        "integration", StageData(record("integration", exit_code=1), suite=suite(raised)), POLICY
    )
    assert kinds(v) == [("CRITICAL", "integration_raised")]
    assert "src/amptrain/legacy.py:80" in v.findings[0].fix


def test_no_test_ran_is_not_a_pass_whether_there_were_none_or_all_were_skipped() -> None:
    for tests, said in ((suite(), "no test case"), (suite(case("a", "skipped")), "1 test")):
        v = judge_stage("execution", StageData(record(), suite=tests), POLICY)
        assert v.status is StageStatus.FAIL and ("CRITICAL", "stage_failed") in kinds(v)
        assert "junit.xml" in v.findings[0].detail and said in v.findings[0].detail
        assert "allow_no_tests" in v.findings[0].fix
    allowed = Policy(allow_no_tests=("execution",))
    v = judge_stage("execution", StageData(record(), suite=suite()), allowed)
    assert v.status is StageStatus.PASS


def test_skips_warnings_slow_tests_and_coverage() -> None:
    data = StageData(
        record(duration_s=10.0),
        suite=suite(
            case("a", duration_s=9.0),
            case("s1", "skipped", message="needs CUDA"),
            case("s2", "skipped", message="needs CUDA"),
        ),
        coverage=Coverage(72.5, ()),
        warnings=(
            WarningEntry("FutureWarning", "torch.cuda.amp is deprecated", Location("x.py", 3), 2),
            WarningEntry("FutureWarning", "other", Location("y.py", 1), 1),
            WarningEntry("UserWarning", "fyi", Location("z.py", 1), 1),
        ),
    )
    v = judge_stage("execution", data, POLICY)
    assert sorted(kinds(v)) == sorted(
        [
            ("HIGH", "coverage_below_floor"),
            ("INFO", "slow_test"),
            ("LOW", "deprecation_warning"),
            ("LOW", "deprecation_warning"),
            ("INFO", "other_warning"),
            ("INFO", "skipped_test"),
        ]
    )
    skipped = next(f for f in v.findings if f.kind == "skipped_test")
    assert "2" in skipped.title and "needs CUDA" in skipped.title
    assert v.score == 100 - 20 - 1 - 1 and v.status is StageStatus.FAIL  # slowness is not scored
    below = next(f for f in v.findings if f.kind == "coverage_below_floor")
    assert below.detail == check_threshold(POLICY.thresholds["coverage_pct"], 72.5)


def test_every_failure_of_a_test_is_in_its_finding_with_where_and_how_often() -> None:
    failures = (
        Failure("failure", "first", location=Location("a.py", 3)),
        Failure("failure", "", text="x" * 300),
    )
    cases = (
        case("bare", "failed", text="y" * 500),
        case("twice", "failed", failures=failures, attempts=2, location=Location("t.py", 9)),
        case("thrice", "flaky", failures=failures, attempts=3),
    )
    v = judge_stage("execution", StageData(record(), suite=suite(*cases)), POLICY)
    by_test = {f.title.split(" ")[0]: f for f in v.findings}
    assert by_test["tests/t.py::bare"].detail == "y" * 400  # the end of a long traceback
    twice = by_test["tests/t.py::twice"]
    assert "2" in twice.title and "first" in twice.detail and "a.py:3" in twice.detail
    assert "x" * 200 in twice.detail and "x" * 201 not in twice.detail
    assert "t.py:9" in twice.fix
    thrice = by_test["tests/t.py::thrice"]
    assert thrice.kind == "flaky_test" and "3" in thrice.title and "first" in thrice.detail


def test_a_slow_test_is_over_the_limit_not_at_it() -> None:
    policy = Policy(slow_test_s=2.0)
    at = case("at", duration_s=2.0)
    over = case("over", duration_s=2.25, location=Location("t.py", 4))
    v = judge_stage("execution", StageData(record(), suite=suite(at, over)), policy)
    (slow,) = [f for f in v.findings if f.kind == "slow_test"]
    assert "tests/t.py::over" in slow.title and slow.location == Location("t.py", 4)


def test_a_count_mismatch_blocks_and_skips_are_grouped_by_reason() -> None:
    skips = [case(f"s{i}", "skipped", message="needs CUDA") for i in range(25)]
    tests = suite(case("ok"), *skips, case("bare", "skipped"), count_mismatches=("tests=9",))
    v = judge_stage("execution", StageData(record(), suite=tests), POLICY)
    (mismatch,) = [f for f in v.findings if f.kind == "count_mismatch"]
    assert (
        "tests=9" in mismatch.title and mismatch.severity.blocks and "junit.xml" in mismatch.detail
    )
    grouped = {f.title: f for f in v.findings if f.kind == "skipped_test"}
    (cuda,) = [f for t, f in grouped.items() if "needs CUDA" in t]
    assert "25" in cuda.title and cuda.detail.split(", ") == [c.nodeid for c in skips[:20]]
    (bare,) = [f for t, f in grouped.items() if "needs CUDA" not in t]
    assert bare.detail == "tests/t.py::bare"


def test_a_count_mismatch_in_a_pytest_file_no_plugin_witnessed_names_the_plugin() -> None:
    """pytest counts subtests in tests= and writes them no element: its plugin counts them."""
    for witnessed, named in ((False, True), (True, False), (None, False)):
        tests = suite(case("ok"), count_mismatches=("tests=9",), witnessed=witnessed)
        v = judge_stage("execution", StageData(record(), suite=tests), POLICY)
        (mismatch,) = [f for f in v.findings if f.kind == "count_mismatch"]
        assert mismatch.severity.blocks and ("install stagegate" in mismatch.fix) is named


def test_the_same_warning_at_the_same_place_adds_up() -> None:
    here = Location("m.py", 5)
    warnings = (
        WarningEntry("FutureWarning", "old  api", here, 2),
        WarningEntry("FutureWarning", "old api", here, 3),
    )
    v = judge_stage(
        "execution", StageData(record(), suite=suite(case("a")), warnings=warnings), POLICY
    )
    (warning,) = v.findings
    assert warning.kind == "deprecation_warning" and warning.location == here
    assert "5" in warning.detail and "old api" in warning.title


def test_lint_levels_map_to_kinds() -> None:
    items = [
        LintFinding("ruff", f"C{level}", "m", level, Location("a.py", 1))
        for level in ("error", "warning", "style", "odd")
    ]
    v = judge_stage("static", StageData(record("static"), lint={"ruff": items}), POLICY)
    assert sorted((f.title.split(":")[0], f.kind) for f in v.findings) == [
        ("ruff Cerror", "lint_error"),
        ("ruff Codd", "lint_error"),  # a level no reader writes counts as an error
        ("ruff Cstyle", "lint_style"),
        ("ruff Cwarning", "lint_warning"),
    ]
    assert all("C" in f.fix for f in v.findings)


def test_a_missing_side_file_says_why_it_may_be_missing() -> None:
    side = (MissingFile("metrics", "out/curves.json", "metrics file out/curves.json is gone"),)
    why = {
        None: "no test results",
        suite(case("a")): "every test passed",
        suite(case("a", "failed")): "failed or were skipped",
        suite(case("a", "error")): "failed or were skipped",
        suite(case("a", "skipped")): "failed or were skipped",
        suite(case("a", "error"), case("b", "skipped")): "failed or were skipped",
    }
    optional = replace(POLICY, required=("static",))  # a stage that is not required
    for tests, said in why.items():
        data = StageData(record(), suite=tests, missing_files=side)
        found = [
            f
            for f in judge_stage("integration", data, optional).findings
            if f.kind == "side_file_missing"
        ]
        assert [f.title.split(" ")[0] for f in found] == ["curves.json"]
        assert said in found[0].detail and found[0].severity.value == "LOW"


def _covered(**files: int) -> Coverage:
    """Coverage of each file (``__`` for ``/``), the lines and branches it counts."""
    entries = (FileCoverage(n.replace("__", "/"), 90.0, (), (0, c)) for n, c in files.items())
    return Coverage(90.0, tuple(entries))


# How coverage names an untouched src/amptrain/loop.py on the base and in the change, a file
# the change's list names, and how that list names loop.py where the change touches it
A, B = "/home/ci/work/r/src/amptrain/loop.py", "/tmp/w/src/amptrain/loop.py"
LOOP = "src/amptrain/loop.py"
NAMED = {
    "relative": (LOOP, LOOP, "src/amptrain/trainer.py", LOOP),
    "absolute-in-two-checkouts": (A, B, "src/amptrain/trainer.py", LOOP),
    "relative-to-a-subfolder": (LOOP, LOOP, "pkg/src/amptrain/trainer.py", f"pkg/{LOOP}"),
}


def _narrowed(data: StageData) -> list[tuple[str, str]]:
    found = judge_stage("execution", data, POLICY).findings
    return [(f.severity.value, f.location.file) for f in found if f.kind == "coverage_narrowed"]


@pytest.mark.parametrize("counted", [0, 20, 50, 60])  # 0: not measured at all
@pytest.mark.parametrize("named", NAMED.values(), ids=NAMED)
def test_an_untouched_file_measured_less_than_on_the_base_is_found_however_coverage_names_it(
    named: tuple[str, str, str, str], counted: int
) -> None:
    base, now, listed, touched = named
    files = {now.replace("/", "__"): counted} if counted else {}
    data = StageData(
        record(),
        coverage=_covered(**files, other=10),
        base_coverage=_covered(**{base.replace("/", "__"): 50}),
        changed=(listed,),
    )
    assert _narrowed(data) == ([("HIGH", base)] if counted < 50 else [])
    assert _narrowed(replace(data, changed=(listed, touched))) == []  # the change's to shrink
    assert _narrowed(replace(data, changed=None)) == []  # no base named the change's files
