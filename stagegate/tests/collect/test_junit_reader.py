"""Details of the JUnit reader that decide what a report names: a failure with no message, the
same test in two unnamed suites."""

from __future__ import annotations

from pathlib import Path

from stagegate.collect import read_junit


def _read(tmp_path: Path, document: str) -> dict:
    path = tmp_path / "junit.xml"
    path.write_text(document)
    return {c.nodeid: c for c in read_junit(path, root=tmp_path).cases}


def test_a_failure_without_a_message_is_named_by_its_first_line(tmp_path: Path) -> None:
    text = "\n  expected 1, got 2\nat t.c:5\nat t.c:9\n"
    cases = _read(
        tmp_path,
        f'<testsuite name="s"><testcase classname="c" name="t"><failure>{text}</failure>'
        '</testcase><testcase classname="c" name="u"><error/></testcase></testsuite>',
    )
    failed = cases["c::t"]
    assert failed.message == "expected 1, got 2" and failed.text == text
    assert failed.failures[0].message == "expected 1, got 2"
    assert cases["c::u"].message == "" and cases["c::u"].outcome == "error"


def test_the_same_test_in_two_unnamed_suites_is_numbered_alone(tmp_path: Path) -> None:
    suite = '<testsuite><testcase classname="c" name="t">{}</testcase></testsuite>'
    cases = _read(
        tmp_path,
        f"<testsuites>{suite.format('<failure/>')}{suite.format('')}</testsuites>",
    )
    assert {n: c.outcome for n, c in cases.items()} == {
        "c::t (#1)": "failed",
        "c::t (#2)": "passed",
    }


def test_the_worst_of_the_status_and_result_attributes_decides(tmp_path: Path) -> None:
    said = {
        "a": ('status="run" result="failed"', "failed"),
        "b": ('status="failed" result="skipped"', "failed"),
        "c": ('status="run" result="skipped"', "skipped"),  # GoogleTest's GTEST_SKIP
        "d": ('status="run" result="completed"', "passed"),
        "e": ('status="notrun" result="error"', "error"),
    }
    cases = "".join(f'<testcase classname="k" name="{n}" {a}/>' for n, (a, _) in said.items())
    read = _read(tmp_path, f'<testsuite name="s">{cases}</testsuite>')
    assert {n: read[f"k::{n}"].outcome for n in said} == {n: o for n, (_, o) in said.items()}
    assert read["k::a"].message == "status failed" and read["k::c"].message == "status skipped"


def test_a_skip_without_a_reason_and_a_pass_say_none(tmp_path: Path) -> None:
    cases = _read(
        tmp_path,
        '<testsuite name="s"><testcase classname="k" name="a"><skipped/></testcase>'
        '<testcase classname="k" name="b" status="weird"><skipped/></testcase>'
        '<testcase classname="k" name="c"/></testsuite>',
    )
    assert [(c.outcome, c.message, c.attempts) for c in cases.values()] == [
        ("skipped", "", 1),
        ("skipped", "", 1),
        ("passed", "", 1),
    ]
