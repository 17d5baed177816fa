"""JUnit from pytest's subtests and from pytest-rerunfailures, written by the real producers.

Subtests: pytest (9.0 on, its own ``subtests``; before it the pytest-subtests plugin) counts in
``tests=`` every subtest's report, and a subtest that passed writes no element. stagegate's
pytest plugin counts those itself and writes the count beside the JUnit file: with it, a run
whose subtests all pass is no count mismatch and PASSes; without it, the file is read as
strictly as any other. A failed subtest fails its test and BLOCKs.
pytest-rerunfailures writes each try as a ``<testcase>``: a test that failed every try is
failed, one that failed and then passed carries no re-run evidence and reads as passed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stagegate.collect import read_junit
from stagegate.collect.junit import PytestCounts, read_pytest_counts
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import Decision, StageData, TestSuite, counts_path

from ..builders import FIXTURES_ROOT, record

CORPUS = FIXTURES_ROOT / "junit"
SAMPLES = CORPUS / "producers"  # the sample tests the corpus files were written from


def _verdict(suite: TestSuite) -> tuple[Decision, list[str]]:
    """The decision of an execution stage whose only evidence is ``suite`` (its command exited
    0), and the kinds and titles of its findings."""
    began = suite.dated.aware[0] if suite.dated.aware else None  # the run that wrote it
    start = began.isoformat(timespec="seconds") if began else "2026-01-01T00:00:00Z"
    data = StageData(
        record(files={"junit": "junit.xml"}, start=start, duration_s=120.0), suite=suite
    )
    result = judge_stage("execution", data, Policy())
    titles = [f"{f.kind}: {f.title}" for f in result.findings]
    return decide([result]).decision, titles


def _run_pytest(
    tmp_path: Path, sample: str, counted: bool = True, *options: str, also: str = ""
) -> TestSuite:
    """Run the installed pytest (stagegate's plugin with it) for real on a copy of ``sample``
    (and of ``also``) and read its JUnit file, with what the plugin saw unless ``counted`` is
    false."""
    for name in filter(None, (sample, also)):
        shutil.copy(SAMPLES / name, tmp_path / name)
    junit = tmp_path / "junit.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options]
    done = subprocess.run(
        [*command, f"--junitxml={junit}", *filter(None, [sample, also])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert junit.is_file(), done.stdout + done.stderr
    counts = read_pytest_counts(Path(counts_path(str(junit)))) if counted else None
    return read_junit(junit, root=tmp_path, counts=counts)


@pytest.mark.slow
def test_subtests_that_all_pass_are_counted_and_pass(tmp_path: Path) -> None:
    suite = _run_pytest(tmp_path, "test_subtests_pass.py")
    assert {c.nodeid: c.outcome for c in suite.cases} == {
        "test_subtests_pass.py::test_squares": "passed",
        "test_subtests_pass.py::test_plain": "passed",
        "test_subtests_pass.py::TestWords::test_lengths": "passed",
    }
    assert suite.count_mismatches == ()
    assert _verdict(suite) == (Decision.PASS, [])
    counts = read_pytest_counts(tmp_path / "junit.xml.counts.json")
    assert counts.subtest_reports == 5 and counts.raised == frozenset()  # the sample's subtests


@pytest.mark.slow
def test_subtests_without_the_plugins_count_are_read_strictly(tmp_path: Path) -> None:
    suite = _run_pytest(tmp_path, "test_subtests_pass.py", counted=False)
    (mismatch,) = suite.count_mismatches
    assert "declares 8 tests" in mismatch and "holds 3" in mismatch
    decision, findings = _verdict(suite)
    assert decision is Decision.BLOCK and findings[0].startswith("count_mismatch")


@pytest.mark.slow
def test_a_failing_subtest_fails_its_test_and_blocks(tmp_path: Path) -> None:
    suite = _run_pytest(tmp_path, "test_subtests_fail.py")
    cases = {c.name: c for c in suite.cases}
    assert {n: c.outcome for n, c in cases.items()} == {
        "test_evens": "failed",  # a subtests-fixture subtest
        "test_plain": "passed",
        "test_lengths": "failed",  # a unittest subTest
    }
    assert "assert 1 != 1" in cases["test_evens"].failures[0].message
    assert "3 not less than 3" in cases["test_lengths"].failures[0].message
    assert suite.count_mismatches == ()
    decision, findings = _verdict(suite)
    assert decision is Decision.BLOCK
    failed = [f for f in findings if f.startswith("test_failed")]
    assert len(failed) == 2
    assert any("test_evens" in f for f in failed) and any("test_lengths" in f for f in failed)


# What pytest reports as failed or erred in test_outcomes.py: a failed assert, one parameter,
# a fixture that raised, pytest.fail, a teardown that raised, a unittest failure; no skip, no
# expected failure
FAILING = {
    "test_outcomes.py::test_fail",
    "test_outcomes.py::test_param[b/c]",
    "test_outcomes.py::test_fixture_raises",
    "test_outcomes.py::test_teardown_raises",
    "test_outcomes.py::TestClass::test_fails",
    "test_outcomes.py::TestUnit::test_fails",  # a unittest.TestCase's, reported, not raised
}
XDIST = ("-n", "2")


@pytest.mark.slow
@pytest.mark.parametrize("options", [(), XDIST], ids=["one-process", "xdist"])
def test_the_plugin_sees_exactly_the_tests_pytest_fails(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    suite = _run_pytest(tmp_path, "test_outcomes.py", True, *options)
    counts = read_pytest_counts(tmp_path / "junit.xml.counts.json")
    assert counts.raised is not None and len(counts.raised) == len(FAILING)
    assert {c.nodeid for c in suite.cases if c.outcome in ("failed", "error")} == FAILING
    assert (suite.witnessed, suite.contradicted, suite.unreported) == (True, (), ())
    assert suite.foreign_hooks == ()
    decision, findings = _verdict(suite)
    assert decision is Decision.BLOCK
    assert {f.partition(":")[0] for f in findings} == {"test_failed", "skipped_test"}


@pytest.mark.slow
@pytest.mark.parametrize("options", [(), XDIST], ids=["one-process", "xdist"])
def test_the_plugin_names_the_tests_the_run_dropped(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    suite = _run_pytest(tmp_path, "test_outcomes.py", True, "-k", "param or fixture", *options)
    ran = {c.nodeid for c in suite.cases}
    assert ran and all("param" in t or "fixture" in t for t in ran)
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    every = {line for line in collected.splitlines() if line.startswith("test_outcomes.py::")}
    assert set(suite.deselected) == every - ran and suite.empty_files == ()


@pytest.mark.slow
@pytest.mark.parametrize("options", [(), XDIST], ids=["one-process", "xdist"])
def test_failures_a_test_module_rewrites_as_passes_still_block(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    """A module the run imports patches pytest's TestReport: the JUnit file, its counts and
    pytest's exit status all say every test passed; the plugin saw six tests fail."""
    sample = "test_outcomes.py"
    suite = _run_pytest(tmp_path, sample, True, *options, also="test_forged_reports.py")
    assert suite.count("failed") == suite.count("error") == 0  # the forgery worked
    assert set(suite.contradicted) == FAILING and suite.count_mismatches == ()
    decision, findings = _verdict(suite)
    assert decision is Decision.BLOCK
    contradicted = [f for f in findings if f.startswith("outcome_contradicted")]
    assert len(contradicted) == len(FAILING)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("attack", "options", "hooked"),
    [
        ("test_swallowing_plugin.py", (), "test_swallowing_plugin.py: pytest_pyfunc_call"),
        ("test_swallowing_plugin.py", XDIST, "test_swallowing_plugin.py: pytest_pyfunc_call"),
        (
            "test_deselecting_plugin.py",
            (),
            "test_deselecting_plugin.py: pytest_collection_modifyitems",
        ),
        ("test_replaced_runtest.py", (), "pytest's Function.runtest replaced"),
        ("test_report_sent_forged.py", XDIST, "pytest's _pytest.reports._report_to_json replaced"),
        ("test_swapped_runtest_code.py", (), "pytest's Function.runtest replaced"),
    ],
    ids=[
        "swallowing-hook",
        "swallowing-hook-xdist",
        "deselecting-hook",
        "replaced-runtest",
        "report-sent-forged-xdist",
        "swapped-runtest-code",
    ],
)
def test_a_test_module_that_hooks_into_running_tests_blocks(
    tmp_path: Path, attack: str, options: tuple[str, ...], hooked: str
) -> None:
    """Each keeps a failing test's failure out of the JUnit file (it passes, or is not there)
    without raising through the witness; the plugin names the hook or the replaced function."""
    suite = _run_pytest(tmp_path, "test_outcomes.py", True, *options, also=attack)
    failing = {c.nodeid for c in suite.cases if c.outcome in ("failed", "error")}
    assert "test_outcomes.py::test_fail" not in failing  # the attack worked
    assert suite.foreign_hooks == (hooked,)
    decision, findings = _verdict(suite)
    assert decision is Decision.BLOCK
    assert [f for f in findings if f.startswith("foreign_hooks")] == [
        f"foreign_hooks: pytest's running or reporting of tests was hooked: {hooked}"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("first", "then", "victim", "hooked"),
    [
        ("test_outcomes.py", "test_swapped_test_code.py", "test_fail", "its function"),
        ("test_swapped_fixture_code.py", "test_outcomes.py", "test_fixture_raises", "its function"),
        ("test_outcomes.py", "test_swapped_hook_function.py", "test_fail", ""),
    ],
    ids=["test-code-swapped-on-import", "fixture-code-swapped-by-a-test", "hook-function-swapped"],
)
def test_code_swapped_under_pytest_after_collection_blocks(
    tmp_path: Path, first: str, then: str, victim: str, hooked: str
) -> None:
    """A failing test passes because its code, its fixture's code or the function pytest calls
    to run it was swapped after it was collected; nothing raised for the witness to see."""
    suite = _run_pytest(tmp_path, first, True, also=then)
    outcomes = {c.nodeid: c.outcome for c in suite.cases}
    assert outcomes[f"test_outcomes.py::{victim}"] == "passed"  # the attack worked
    expected = (
        f"test_outcomes.py::{victim}: {hooked} or a fixture's code replaced after collection"
        if hooked
        else "python's pytest_pyfunc_call replaced"
    )
    assert suite.foreign_hooks == (expected,)
    assert _verdict(suite)[0] is Decision.BLOCK


@pytest.mark.slow
def test_an_xfail_mark_that_does_not_make_a_failure_expected_leaves_it_witnessed(
    tmp_path: Path,
) -> None:
    suite = _run_pytest(tmp_path, "test_xfail_not_met.py")
    assert suite.count("failed") == 0  # the failure elements were dropped
    assert set(suite.contradicted) == {
        "test_xfail_not_met.py::test_condition_not_met",
        "test_xfail_not_met.py::test_raises_not_matched",
    }


@pytest.mark.slow
def test_a_plugin_a_conftest_registers_during_collection_is_no_foreign_hook(
    tmp_path: Path,
) -> None:
    """A conftest.py below the root is loaded while tests are collected; a plugin object it
    registers is the conftest's own (a gate file), not a test module's."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "conftest.py").write_text(
        "class Helper:\n    def pytest_runtest_setup(self, item):\n        pass\n\n\n"
        "def pytest_configure(config):\n    config.pluginmanager.register(Helper())\n"
    )
    (tmp_path / "sub" / "test_s.py").write_text("def test_s():\n    pass\n")
    suite = _run_pytest(tmp_path, "", True, "sub")
    assert [c.outcome for c in suite.cases] == ["passed"] and suite.foreign_hooks == ()


@pytest.mark.slow
def test_pytest_without_the_plugin_is_unwitnessed(tmp_path: Path) -> None:
    _run_pytest(tmp_path, "test_subtests_pass.py", False, "-p", "no:stagegate_warnings")
    assert not (tmp_path / "junit.xml.counts.json").exists()
    assert read_junit(tmp_path / "junit.xml", root=tmp_path, counts=None).witnessed is None
    suite = read_junit(tmp_path / "junit.xml", root=tmp_path, counts=PytestCounts())
    assert suite.witnessed is False
    assert "outcomes_unwitnessed" in [f.partition(":")[0] for f in _verdict(suite)[1]]


def test_a_test_that_raised_and_passed_when_run_again_is_flaky(tmp_path: Path) -> None:
    """pytest-rerunfailures writes no failure for a test that passed on its re-run; the plugin
    saw the first run raise."""
    counts = PytestCounts(
        raised=frozenset(),
        recovered=frozenset({("test_rerun_sample", "test_fails_then_passes")}),
        deselected=frozenset(),
        skipped_by={},
    )
    suite = read_junit(CORPUS / "pytest-rerunfailures-16.xml", root=SAMPLES, counts=counts)
    cases = {c.name: c for c in suite.cases}
    assert cases["test_fails_then_passes"].outcome == "flaky"
    assert suite.contradicted == () and suite.witnessed is True
    assert any(f.startswith("flaky_test") for f in _verdict(suite)[1])


PYTEST_SUITE = (
    '<testsuites name="pytest tests"><testsuite name="pytest" tests="4" failures="1" '
    'errors="1" skipped="1">{cases}</testsuite></testsuites>'
)
CASES = {
    "failure": '<testcase classname="m" name="f"><failure message="boom"/></testcase>',
    "error": '<testcase classname="m" name="e"><error message="boom"/></testcase>',
    "skipped": '<testcase classname="m" name="s"><skipped message="later"/></testcase>',
}


@pytest.mark.parametrize(("lost", "attribute"), [("failure", "failures"), ("error", "errors")])
def test_a_pytest_suite_that_lost_a_failure_or_error_is_a_mismatch(
    tmp_path: Path, lost: str, attribute: str
) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(PYTEST_SUITE.format(cases="".join(CASES.values()) + CASES["skipped"]))
    assert read_junit(path).count_mismatches == ()
    kept = "".join(case for element, case in CASES.items() if element != lost)
    path.write_text(PYTEST_SUITE.format(cases=kept + CASES["skipped"]))
    suite = read_junit(path)
    assert any(f"declares 1 {attribute}" in m and "holds 0" in m for m in suite.count_mismatches)
    decision, findings = _verdict(suite)
    assert decision is Decision.BLOCK and any(f.startswith("count_mismatch") for f in findings)


def test_naming_a_suite_pytest_switches_no_count_off(tmp_path: Path) -> None:
    """A file that declares 5 tests and holds 2 passes is a mismatch whatever its suite is
    called: the name is a claim of the file, like its counts."""
    path = tmp_path / "junit.xml"
    passing = '<testcase classname="m" name="a"/><testcase classname="m" name="b"/>'
    for name in ("pytest", "unit"):
        path.write_text(f'<testsuite name="{name}" tests="5">{passing}</testsuite>')
        (mismatch,) = read_junit(path).count_mismatches
        assert "declares 5 tests" in mismatch and "holds 2" in mismatch, name


def test_a_rerun_that_failed_every_try_blocks_and_one_that_passed_is_not_flaky() -> None:
    suite = read_junit(CORPUS / "pytest-rerunfailures-16.xml", root=SAMPLES)
    cases = {c.name: c for c in suite.cases}
    every = cases["test_fails_every_time"]
    assert (every.outcome, every.attempts, len(every.failures)) == ("failed", 3, 1)
    then = cases["test_fails_then_passes"]
    assert (then.outcome, then.attempts, then.failures) == ("passed", 2, ())
    assert suite.count("flaky") == 0 and suite.count_mismatches == ()
    decision, findings = _verdict(suite)
    assert decision is Decision.BLOCK
    assert [f for f in findings if "test_fails" in f] == [
        f for f in findings if f.startswith("test_failed") and "test_fails_every_time" in f
    ]
    assert any("3 attempts" in f for f in findings)


def test_a_rerun_is_flaky_only_with_re_run_evidence(tmp_path: Path) -> None:
    # The same file, with the failed first try written as Surefire documents a re-run that
    # later passed (<flakyFailure>): now, and only now, the test is flaky.
    text = (CORPUS / "pytest-rerunfailures-16.xml").read_text()
    last = '<testcase classname="test_rerun_sample" name="test_fails_then_passes" time="0.000" />'
    assert text.count(last) == 2
    evidence = last.replace(
        " />", '><flakyFailure message="fails on the first try only"/></testcase>'
    )
    head, _, tail = text.rpartition(last)
    path = tmp_path / "junit.xml"
    path.write_text(head + evidence + tail)
    cases = {c.name: c for c in read_junit(path, root=SAMPLES).cases}
    assert (cases["test_fails_then_passes"].outcome, cases["test_fails_then_passes"].attempts) == (
        "flaky",
        3,
    )
    assert cases["test_fails_every_time"].outcome == "failed"
