"""What a JUnit file claims about itself is checked against what it holds: totals at every
level, for every producer, whatever the suite is called; failures and errors of a suite that lie
outside any test case are failed tests; and the pytest plugin's count beside a file is believed
only as sealed by the stage's record."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from stagegate.collect import collect_stage, load_record, read_junit
from stagegate.collect.junit import PytestCounts
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import Decision, Location, Severity, StageData, StageStatus
from stagegate.record.runner import run_stage

from ..builders import record

PASSING = '<testcase classname="m" name="a"/><testcase classname="m" name="b"/>'


def _judged(data: StageData) -> tuple[Decision, list[str]]:
    verdict = judge_stage("execution", data, Policy())
    return decide([verdict]).decision, [f.kind for f in verdict.findings]


def _read(tmp_path: Path, xml: str) -> tuple[tuple[str, ...], Decision, list[str]]:
    path = tmp_path / "junit.xml"
    path.write_text(xml)
    suite = read_junit(path)
    decision, kinds = _judged(StageData(record(files={"junit": str(path)}), suite=suite))
    return suite.count_mismatches, decision, kinds


@pytest.mark.parametrize(
    ("totals", "said"),
    [
        ('tests="2" failures="2" errors="1"', "declares 2 failures"),
        ('tests="5"', "declares 5 tests"),
        ('tests="2" errors="1"', "declares 1 errors"),
    ],
    ids=["jest-style-failures", "tests", "errors"],
)
def test_file_totals_that_claim_more_than_the_file_holds_block(
    tmp_path: Path, totals: str, said: str
) -> None:
    xml = f'<testsuites {totals}><testsuite name="unit">{PASSING}</testsuite></testsuites>'
    mismatches, decision, kinds = _read(tmp_path, xml)
    assert any(m.startswith("the file's <testsuites>") and said in m for m in mismatches)
    assert decision is Decision.BLOCK and set(kinds) == {"count_mismatch"}


def test_totals_that_match_or_claim_less_pass(tmp_path: Path) -> None:
    failing = '<testcase classname="m" name="f"><failure message="x"/></testcase>'
    xml = (
        '<testsuites tests="3" failures="1"><testsuite name="unit" tests="3" failures="0">'
        f"{PASSING}{failing}</testsuite></testsuites>"
    )
    mismatches, _, kinds = _read(tmp_path, xml)
    assert mismatches == () and kinds == ["test_failed"]  # the element decides, not the total


@pytest.mark.parametrize("name", ["pytest", "pytest tests", "unit"])
def test_the_suites_name_changes_no_rule(tmp_path: Path, name: str) -> None:
    xml = f'<testsuite name="{name}" tests="5" failures="1">{PASSING}</testsuite>'
    mismatches, decision, _ = _read(tmp_path, xml)
    assert len(mismatches) == 2 and decision is Decision.BLOCK


@pytest.mark.parametrize("tag", ["error", "failure"])
def test_a_suite_failure_outside_any_test_case_is_a_failed_test_of_that_suite(
    tmp_path: Path, tag: str
) -> None:
    """Ant, JUnit 4 and Surefire write this when a test class cannot start: none of its
    tests ran."""
    xml = (
        f'<testsuites><testsuite name="com.example.DbTest" tests="1" {tag}s="1">'
        f'<{tag} message="Connection refused" type="java.net.ConnectException">'
        "java.net.ConnectException: Connection refused\n"
        "\tat com.example.DbTest.setUpClass(DbTest.java:21)</"
        f"{tag}></testsuite>"
        f'<testsuite name="com.example.MathTest" tests="2">{PASSING}</testsuite></testsuites>'
    )
    path = tmp_path / "junit.xml"
    path.write_text(xml)
    suite = read_junit(path)
    broken = [c for c in suite.cases if c.suite == "com.example.DbTest"]
    assert [c.outcome for c in broken] == ["error" if tag == "error" else "failed"]
    assert "Connection refused" in broken[0].message and suite.count_mismatches == ()
    decision, kinds = _judged(StageData(record(files={"junit": str(path)}), suite=suite))
    assert decision is Decision.BLOCK and kinds == ["test_failed"]


def _stage(
    tmp_path: Path, declared: int, counted: int | None, raised: str = "[]", version: int = 4
) -> str:
    """A stage that writes a pytest JUnit file of 1 test case declaring ``declared`` tests and,
    unless ``counted`` is None, what the plugin saw beside it (``counted`` subtest reports, the
    tests that ``raised``); the record seals both. The counts file's path."""
    junit = tmp_path / "junit.xml"
    xml = (
        f'<testsuites name="pytest tests"><testsuite name="pytest" tests="{declared}">'
        '<testcase classname="test_m" name="test_squares"/></testsuite></testsuites>'
    )
    lines = [f"open({str(junit)!r}, 'w').write({xml!r})"]
    if counted is not None:
        seen = f', "raised": {raised}' if version > 1 else ""
        seen += ', "deselected": []' if version > 2 else ""
        seen += ', "skipped_by": []' if version > 3 else ""
        counts = f'{{"format_version": {version}, "subtest_reports": {counted}{seen}}}'
        lines.append(f"open({str(junit) + '.counts.json'!r}, 'w').write({counts!r})")
    run_stage(
        "execution",
        [sys.executable, "-c", "; ".join(lines)],
        out_dir=tmp_path,
        files={"junit": str(junit)},
        stdout=io.StringIO(),
    )
    return f"{junit}.counts.json"


def _collected(tmp_path: Path) -> StageData:
    return collect_stage(load_record(tmp_path / "execution.json"), tmp_path)


def test_the_plugins_count_sealed_with_the_file_allows_its_subtests(tmp_path: Path) -> None:
    _stage(tmp_path, declared=5, counted=4)
    data = _collected(tmp_path)
    assert data.suite is not None and data.suite.count_mismatches == ()
    assert _judged(data) == (Decision.PASS, [])


def test_too_small_a_count_still_leaves_a_mismatch(tmp_path: Path) -> None:
    _stage(tmp_path, declared=5, counted=2)
    data = _collected(tmp_path)
    assert data.suite is not None and len(data.suite.count_mismatches) == 1
    assert _judged(data) == (Decision.BLOCK, ["count_mismatch"])


@pytest.mark.parametrize("when", ["changed", "written-after", "removed"])
def test_a_count_changed_written_or_removed_after_the_stage_is_not_believed(
    tmp_path: Path, when: str
) -> None:
    counts = _stage(tmp_path, declared=5, counted={"changed": 2, "removed": 4}.get(when))
    if when == "removed":
        Path(counts).unlink()
    else:  # enough subtests to make the file's 5 tests look whole, claimed after the stage
        Path(counts).write_text('{"format_version": 2, "subtest_reports": 4, "raised": []}')
    data = _collected(tmp_path)
    assert data.suite is None and data.input_errors
    assert "counts" in data.input_errors[0]
    verdict = judge_stage("execution", data, Policy())
    assert decide([verdict]).decision is Decision.BLOCK and verdict.status is StageStatus.ERROR


def test_a_test_the_plugin_saw_raise_and_the_file_passed_blocks(tmp_path: Path) -> None:
    _stage(tmp_path, declared=1, counted=0, raised='[["test_m", "test_squares"]]')
    data = _collected(tmp_path)
    assert data.suite is not None and data.suite.contradicted == ("test_m::test_squares",)
    assert _judged(data) == (Decision.BLOCK, ["outcome_contradicted"])


def test_a_test_the_plugin_saw_raise_and_the_file_lacks_blocks(tmp_path: Path) -> None:
    _stage(tmp_path, declared=1, counted=0, raised='[["test_m", "test_gone"]]')
    data = _collected(tmp_path)
    assert data.suite is not None and data.suite.unreported == ("test_m::test_gone",)
    assert _judged(data) == (Decision.BLOCK, ["outcome_contradicted"])


@pytest.mark.parametrize(
    "version",
    [1, 2, 3, None],
    ids=["before-the-witness", "before-the-dropped-tests", "before-the-skips", "no-file"],
)
def test_a_pytest_file_without_the_plugins_witness_blocks_unless_the_policy_lets_it(
    tmp_path: Path, version: int | None
) -> None:
    """Without the witness, what the file says of its tests is their claim: it blocks (HIGH)
    by default; a policy whose pytest runs where stagegate cannot be installed says INFO."""
    _stage(tmp_path, declared=1, counted=None if version is None else 0, version=version or 4)
    data = _collected(tmp_path)
    assert data.suite is not None and data.suite.witnessed is False
    assert _judged(data) == (Decision.BLOCK, ["outcomes_unwitnessed"])
    lenient = Policy(severity={**Policy().severity, "outcomes_unwitnessed": Severity.INFO})
    assert decide([judge_stage("execution", data, lenient)]).decision is Decision.PASS


def test_a_hook_the_witness_saw_blocks(tmp_path: Path) -> None:
    _stage(tmp_path, declared=1, counted=0, raised='[], "foreign": ["t.py: pytest_pyfunc_call"]')
    data = _collected(tmp_path)
    assert data.suite is not None and data.suite.foreign_hooks == ("t.py: pytest_pyfunc_call",)
    assert _judged(data) == (Decision.BLOCK, ["foreign_hooks"])


def test_a_skip_the_code_under_test_raised_blocks_where_the_file_says_skipped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(
        '<testsuites name="pytest tests"><testsuite name="pytest" tests="2">'
        '<testcase classname="test_m" name="test_a"><skipped message="later"/></testcase>'
        '<testcase classname="test_m" name="test_b"/></testsuite></testsuites>'
    )
    where = {("test_m", "test_a"): "src/lib.py:7", ("test_m", "test_b"): "src/lib.py:9"}
    counts = PytestCounts(raised=frozenset(), deselected=frozenset(), skipped_by=where)
    suite = read_junit(path, root=tmp_path, counts=counts)
    assert suite.skipped_by_code == (("test_m::test_a", Location("src/lib.py", 7)),)  # b passed
    verdict = judge_stage("execution", StageData(record(), suite=suite), Policy())
    (found,) = [f for f in verdict.findings if f.kind == "skipped_by_code_under_test"]
    assert found.severity is Severity.HIGH and found.location == Location("src/lib.py", 7)
    assert decide([verdict]).decision is Decision.BLOCK


@pytest.mark.parametrize("key", ["skipped_by", "deselected_marks"])
def test_a_witness_without_a_list_of_triples_is_an_input_error(tmp_path: Path, key: str) -> None:
    skips = f'[], "skipped_by": [], "{key}": [["test_m", "test_a"]]'
    _stage(tmp_path, declared=1, counted=0, raised=skips, version=3)
    data = _collected(tmp_path)
    assert data.suite is None and key in data.input_errors[0]


@pytest.mark.parametrize("raised", ['"test_m"', '[["test_m"]]', "[[1, 2]]", "null"])
def test_a_witness_without_a_list_of_names_is_an_input_error(tmp_path: Path, raised: str) -> None:
    _stage(tmp_path, declared=1, counted=0, raised=raised)
    data = _collected(tmp_path)
    assert data.suite is None and "raised" in data.input_errors[0]


@pytest.mark.parametrize("foreign", ['"t.py"', "[1]"])
def test_a_witness_without_a_list_of_hooks_is_an_input_error(tmp_path: Path, foreign: str) -> None:
    _stage(tmp_path, declared=1, counted=0, raised=f'[], "foreign": {foreign}')
    data = _collected(tmp_path)
    assert data.suite is None and "foreign" in data.input_errors[0]


def test_held_to_the_gates_witness_the_plugins_own_file_is_not_enough(tmp_path: Path) -> None:
    """`stagegate report --gate-witness`: only JUNIT.witness.json (the gate's own witness, as
    tools/ci/cpu_stage.py runs it) witnesses a pytest file's outcomes."""
    counts = _stage(tmp_path, declared=1, counted=0)  # the plugin's file, none of the gate's
    record = load_record(tmp_path / "execution.json")
    gated = collect_stage(record, tmp_path, gate_witness=True)
    assert gated.suite is not None and gated.suite.witnessed is False
    assert _collected(tmp_path).suite.witnessed is True  # the plugin's own file, without it
    witness = Path(counts.removesuffix(".counts.json") + ".witness.json")
    witness.write_text(Path(counts).read_text())  # written after the stage: not its file
    assert collect_stage(record, tmp_path, gate_witness=True).suite is None
