"""JUnit files written by real producers (and minimal ones from documented formats): what is
read from each, and the verdict of a stage whose only evidence is that file."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from stagegate.collect import read_junit
from stagegate.errors import InputError
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import OUTCOMES, StageData, StageRecord, TestSuite

from ..builders import CPU_MACHINE, FIXTURES_ROOT

CORPUS = FIXTURES_ROOT / "junit"
EXPECTED = tomllib.loads((CORPUS / "expected.toml").read_text())
# The pytest samples ran in a copy of producers/: their test files exist in that "checkout".
ROOT = CORPUS / "producers"


def _record() -> StageRecord:
    return StageRecord(
        stage="execution",
        command=["runner"],
        exit_code=0,  # the runner said it passed: the file alone must decide
        start="2026-01-05T10:00:00Z",
        duration_s=1.0,
        files={"junit": "junit.xml"},
        environment=CPU_MACHINE,
    )


def _verdict(suite: TestSuite | None, errors: tuple[str, ...] = ()) -> str:
    data = StageData(_record(), suite=suite, input_errors=errors)
    return decide([judge_stage("execution", data, Policy())]).decision.value


def _read(entry: dict) -> TestSuite:
    return read_junit(CORPUS / entry["file"], root=ROOT)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_corpus_file(name: str) -> None:
    entry = EXPECTED[name]
    if "unreadable" in entry:
        with pytest.raises(InputError) as err:
            _read(entry)
        assert entry["unreadable"] in str(err.value) and entry["file"] in str(err.value)
        assert _verdict(None, (str(err.value),)) == entry["decision"] == "BLOCK"
        return
    suite = _read(entry)
    counts = {o: suite.count(o) for o in OUTCOMES}
    assert counts == {o: entry["counts"].get(o, 0) for o in OUTCOMES}
    assert len(suite.count_mismatches) == entry.get("mismatches", 0)
    assert _verdict(suite) == entry["decision"]
    cases = {c.nodeid: c for c in suite.cases}
    assert sorted(n for n, c in cases.items() if c.outcome == "flaky") == sorted(
        entry.get("flaky", [n for n, c in cases.items() if c.outcome == "flaky"])
    )
    if "attempts" in entry:
        assert cases[entry["attempts"]["test"]].attempts == entry["attempts"]["count"]
    if "failures" in entry:
        assert len(cases[entry["failures"]["test"]].failures) == entry["failures"]["count"]
    if "location" in entry:
        where = str(cases[entry["location"]["test"]].location)
        if "at" in entry["location"]:
            assert where == entry["location"]["at"]
        else:
            assert where.endswith(entry["location"]["at_end"])


def test_every_corpus_file_is_in_the_table() -> None:
    listed = {e["file"] for e in EXPECTED.values()}
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.xml")}
    assert on_disk == listed


def test_a_run_of_skipped_tests_is_no_pass_unless_the_policy_allows_it() -> None:
    suite = _read(EXPECTED["pytest-all-skipped"])
    data = StageData(_record(), suite=suite)
    blocked = judge_stage("execution", data, Policy())
    assert blocked.status.value == "FAIL"
    assert any(f.title.startswith("no test ran: 2 skipped") for f in blocked.findings)
    allowed = judge_stage("execution", data, Policy(allow_no_tests=("execution",)))
    assert allowed.status.value == "PASS"


def test_flaky_is_counted_once_and_scored_by_its_own_severity() -> None:
    suite = _read(EXPECTED["surefire-flaky-only"])
    verdict = judge_stage("execution", StageData(_record(), suite=suite), Policy())
    (flaky,) = [f for f in verdict.findings if f.kind == "flaky_test"]
    assert flaky.severity.value == "MEDIUM" and "2 attempts" in flaky.title
    assert "Read timed out" in flaky.detail and str(flaky.location) == "NetTest.java:12"
    assert verdict.score == 95 and verdict.status.value == "PASS"


def test_every_failure_of_a_test_is_in_its_finding() -> None:
    suite = _read(EXPECTED["googletest"])
    verdict = judge_stage("execution", StageData(_record(), suite=suite), Policy())
    (failed,) = [f for f in verdict.findings if f.kind == "test_failed"]
    assert "(1)" in failed.detail and "(2)" in failed.detail and "second failure" in failed.detail


def test_pytest_names_become_paths_only_for_files_in_the_checkout(tmp_path: Path) -> None:
    elsewhere = read_junit(CORPUS / "pytest.xml", root=tmp_path)
    assert "test_pytest_sample::test_passes" in {c.nodeid for c in elsewhere.cases}
    here = read_junit(CORPUS / "pytest.xml", root=ROOT)
    assert "test_pytest_sample.py::test_passes" in {c.nodeid for c in here.cases}


@pytest.mark.slow
def test_a_large_file_is_streamed(tmp_path: Path) -> None:
    path = tmp_path / "big.xml"
    text = "x" * 2000
    with path.open("w") as f:
        f.write('<testsuites><testsuite name="big" tests="50000">')
        for i in range(50_000):
            f.write(f'<testcase classname="big" name="t{i}"><system-out>{text}</system-out>')
            f.write("</testcase>")
        f.write("</testsuite></testsuites>")
    suite = read_junit(path)
    assert suite.count("passed") == 50_000 and suite.count_mismatches == ()
