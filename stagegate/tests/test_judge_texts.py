"""What each finding tells the reader: its title, detail and fix, whole. A report that names
the wrong fix, or drops the stderr that shows why a stage died, misleads as a wrong verdict
does."""

from __future__ import annotations

from test_judge import bench, case, record, suite

from stagegate.judge import StageData, judge_stage
from stagegate.model import (
    Coverage,
    Failure,
    LintFinding,
    Location,
    TestSuite,
    WarningEntry,
)
from stagegate.policy import Policy, check_threshold

POLICY = Policy()
TAIL = "".join(f"{i % 10}" for i in range(1000))


def _texts(name: str, data: StageData, policy: Policy = POLICY) -> list[tuple[str, ...]]:
    verdict = judge_stage(name, data, policy)
    return [(f.kind, f.title, f.detail, f.fix) for f in verdict.findings]


def test_a_command_that_could_not_start() -> None:
    data = StageData(record(exit_code=None, error="no such file: ruff"))
    assert _texts("static", data)[0] == (
        "stage_failed",
        "stage command could not start",
        "no such file: ruff",
        "install the tool the stage runs, or fix the command in noxfile.py",
    )


def test_a_timeout_and_a_signal_keep_the_last_600_characters_of_stderr() -> None:
    timed_out = StageData(record(exit_code=None, timed_out=True, duration_s=61.4, stderr_tail=TAIL))
    assert _texts("execution", timed_out)[0] == (
        "stage_failed",
        "stage timed out after 61 s",
        TAIL[-600:],
        "find the step that hangs or raise the stage's --timeout",
    )
    killed = StageData(record(exit_code=None, signal=9, stderr_tail=TAIL))
    assert _texts("execution", killed)[0] == (
        "stage_failed",
        "stage command was killed by signal 9",
        TAIL[-600:],
        "look for memory exhaustion or an external kill",
    )


FIX_NO_TESTS = (
    "a run that executes no test verifies nothing: check the selection, markers and "
    "skip conditions (or list the stage in allow_no_tests)"
)


def test_no_test_ran_says_whether_there_were_none_or_all_were_skipped() -> None:
    empty = StageData(record(files={"junit": "j.xml"}), suite=suite())
    assert (
        "stage_failed",
        "no test ran: 0 skipped, 0 executed",
        "junit.xml holds no test case",
        FIX_NO_TESTS,
    ) in _texts("execution", empty)
    skipped = StageData(record(), suite=suite(case("a", "skipped"), case("b", "skipped")))
    assert (
        "stage_failed",
        "no test ran: 2 skipped, 0 executed",
        "junit.xml holds 2 test(s) and every one was skipped or disabled",
        FIX_NO_TESTS,
    ) in _texts("execution", skipped)


def test_failures_say_where_and_how_often() -> None:
    failures = (
        Failure("failure", "first", location=Location("a.py", 3)),
        Failure("failure", "", text="x" * 300),
    )
    cases = (
        case("one", "failed", message="boom", text="t" * 500),
        case("bare", "failed", text="y" * 500),
        case("twice", "failed", failures=failures, attempts=2, location=Location("t.py", 9)),
        case("thrice", "flaky", failures=failures, attempts=3),
    )
    found = {t[1]: t for t in _texts("execution", StageData(record(), suite=suite(*cases)))}
    assert found["tests/t.py::one failed"][2:] == ("boom", "run the test locally")
    assert found["tests/t.py::bare failed"][2] == "y" * 400
    assert found["tests/t.py::twice failed in all 2 attempts"][2:] == (
        "(1) first at a.py:3 (2) " + "x" * 200,
        "fix the code at t.py:9",
    )
    assert found["tests/t.py::thrice is flaky: it failed, then passed (3 attempts)"][3] == (
        "find what makes it depend on order, timing or state; a re-run hides a bug"
    )
    assert "tests/t.py::one failed" in found  # one attempt: no count in the title


def test_a_slow_test_is_over_the_limit_not_at_it() -> None:
    policy = Policy(slow_test_s=2.0)
    at = case("at", duration_s=2.0)
    over = case("over", duration_s=2.25, location=Location("t.py", 4))
    found = _texts("execution", StageData(record(), suite=suite(at, over)), policy)
    slow = [t for t in found if t[0] == "slow_test"]
    assert slow == [
        (
            "slow_test",
            "tests/t.py::over took 2.2 s (over 2 s)",
            "",
            "shrink its data or mark it slow",
        )
    ]
    verdict = judge_stage("execution", StageData(record(), suite=suite(over)), policy)
    assert verdict.findings[0].location == Location("t.py", 4)


def test_a_count_mismatch_and_grouped_skips() -> None:
    skips = [case(f"s{i}", "skipped", message="needs CUDA") for i in range(25)]
    bare = case("bare", "skipped")
    broken = TestSuite(
        cases=(case("ok"), *skips, bare), source="j.xml", count_mismatches=("tests=9",)
    )
    found = {t[1]: t for t in _texts("execution", StageData(record(), suite=broken))}
    assert found["test count mismatch: tests=9"][2:] == (
        "j.xml: a file cut off between elements still parses",
        "check that the test run wrote the whole file; if the producer counts something "
        "else in tests= (Catch2 v2 counts assertions), set severity.count_mismatch",
    )
    assert found["25 skipped: needs CUDA"][2] == ", ".join(c.nodeid for c in skips[:20])
    assert found["1 skipped: no reason given"][2] == "tests/t.py::bare"


def test_the_same_warning_at_the_same_place_adds_up() -> None:
    here = Location("m.py", 5)
    warnings = (
        WarningEntry("FutureWarning", "old  api", here, 2),
        WarningEntry("FutureWarning", "old api", here, 3),
    )
    found = _texts("execution", StageData(record(), suite=suite(case("a")), warnings=warnings))
    assert (
        "deprecation_warning",
        "FutureWarning: old api",
        "seen 5 time(s)",
        "move to the API the warning names",
    ) in found


def test_lint_levels_map_to_kinds() -> None:
    items = [
        LintFinding("ruff", f"C{level}", "m", level, Location("a.py", 1))
        for level in ("error", "warning", "style", "odd")
    ]
    found = _texts("static", StageData(record("static"), lint={"ruff": items}))
    assert sorted((t[1], t[0]) for t in found) == [
        ("ruff Cerror: m", "lint_error"),
        ("ruff Codd: m", "lint_warning"),  # a level no reader writes counts as a warning
        ("ruff Cstyle: m", "lint_style"),
        ("ruff Cwarning: m", "lint_warning"),
    ]


def test_a_missing_side_file_says_why_it_may_be_missing() -> None:
    passed = suite(case("a"))
    failed = suite(case("a", "failed"))
    expected = {
        None: "the stage wrote no test results either",
        passed: "though every test passed: check the code that writes it",
        failed: "likely because tests that write it failed or were skipped (see above)",
    }
    for tests, why in expected.items():
        data = StageData(record(), suite=tests, missing_side_files=("curves.json",))
        side = [t for t in _texts("integration", data) if t[0] == "side_file_missing"]
        assert side == [
            (
                "side_file_missing",
                "curves.json was not written",
                why,
                "its charts and figures are left out of this report",
            )
        ]


def test_a_stage_with_no_record() -> None:
    missing = judge_stage("execution", StageData(None), POLICY)
    assert (missing.required, missing.note) == (True, "")
    assert [(f.stage, f.title, f.fix) for f in missing.findings] == [
        (
            "execution",
            "execution has no record: the stage did not run",
            "run the execution stage (nox -s verify runs every stage)",
        )
    ]
    skipped = judge_stage("performance", StageData(None), POLICY.only(("static", "performance")))
    assert skipped.required and skipped.findings == ()
    assert skipped.note == "performance did not run here and is allowed to be skipped: NOT VERIFIED"


def test_unreadable_output_and_coverage_below_the_floor() -> None:
    data = StageData(
        record(), suite=suite(case("a")), coverage=Coverage(50.0, ()), input_errors=("bad.xml",)
    )
    found = {t[1]: t for t in _texts("execution", data)}
    assert found["unreadable output: bad.xml"][3] == (
        "re-run the stage; if the file is still unreadable, its producer changed format "
        "or crashed while writing it"
    )
    below = found["coverage below the floor"]
    assert below[2] == check_threshold(POLICY.thresholds["coverage_pct"], 50.0)
    assert below[3] == "test the files with the most missed lines (see Coverage)"


def test_a_cpu_benchmark_where_the_gpu_is_required() -> None:
    data = StageData(record("performance"), benchmark=bench(gpu=False))
    found = {t[1]: t for t in _texts("performance", data, POLICY.require(("performance",)))}
    assert found["GPU performance is required but was not verified"][2:] == (
        "the benchmark ran preset cpu-smoke on cpu",
        "run this stage on the self-hosted GPU runner",
    )
