"""One JUnit element at a time: failure kinds and messages, re-runs, statuses written as
attributes, and pytest names turned back into node ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagegate.collect import read_junit
from stagegate.errors import InputError
from stagegate.model import Location


def _suite(tmp_path: Path, name: str, cases: str) -> dict:
    path = tmp_path / "j.xml"
    path.write_text(f'<testsuite name="{name}" tests="9">{cases}</testsuite>')
    return {c.nodeid: c for c in read_junit(path, root=tmp_path).cases}


def test_failure_kinds_messages_and_places(tmp_path: Path) -> None:
    src = tmp_path / "src"
    cases = _suite(
        tmp_path,
        "go",
        f"""
        <testcase classname="pkg" name="err"><error>first line
second line
third line</error></testcase>
        <testcase classname="pkg" name="long"><failure>{"x" * 600}</failure></testcase>
        <testcase classname="pkg" name="nested"><failure message="m">outer<stackTrace>inner
            </stackTrace></failure></testcase>
        <testcase classname="pkg" name="case-placed" file="{src}/z.go" line="5">
            <failure message="no frame here">none either</failure></testcase>
        <testcase name="bare"/>
        <testcase classname="pkg"/>
        <testcase classname="pkg" name="rerun"><failure message="f1"/>
            <rerunError message="r1"/><rerunFailure message="r2"/></testcase>
        <testcase classname="pkg" name="flaky"><flakyError message="e"/>
            <flakyFailure message="f"/></testcase>
        <testcase classname="pkg" name="placed" file="x.go">
            <failure message="m" file="{src}/y.go" line="12">t</failure></testcase>
        <testcase classname="pkg" name="status" result="Skipped"/>
        <testcase classname="pkg" name="state" status="NotRun"/>
        """,
    )
    err = cases["pkg::err"]
    assert (err.outcome, err.message) == ("error", "first line")
    assert err.failures[0].text.endswith("second line\nthird line")
    assert cases["pkg::long"].message == "x" * 500
    assert cases["pkg::nested"].failures[0].text.startswith("outerinner")
    assert cases["pkg::case-placed"].failures[0].location == Location("src/z.go", 5)
    assert cases["bare"].outcome == "passed" and cases["pkg::?"].name == "?"
    rerun = cases["pkg::rerun"]
    assert (rerun.outcome, rerun.attempts) == ("failed", 3)
    assert [f.kind for f in rerun.failures] == ["failure", "error", "failure"]
    flaky = cases["pkg::flaky"]
    assert (flaky.outcome, [f.kind for f in flaky.failures]) == ("flaky", ["error", "failure"])
    placed = cases["pkg::placed"]
    assert placed.file == "x.go"
    assert placed.failures[0].location == Location("src/y.go", 12)
    assert cases["pkg::status"].outcome == "skipped"
    assert cases["pkg::status"].message == "status skipped"
    assert cases["pkg::state"].message == "status notrun"
    assert cases["pkg::err"].file == ""


def test_pytest_class_names_become_node_ids(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("")
    (tmp_path / "Top.py").write_text("")
    cases = _suite(
        tmp_path,
        "pytest",
        f"""
        <testcase classname="pkg.mod.TestGroup.TestInner" name="test_a"/>
        <testcase classname="pkg.mod" name="test_b"/>
        <testcase classname="Top" name="test_c"/>
        <testcase classname="pkg.gone.TestX" name="test_d"/>
        <testcase classname="pkg.mod" name="test_e"><failure message="E">
{tmp_path}/pkg/mod.py:3: in test_e
E   assert 1 == 2</failure></testcase>
        """,
    )
    assert cases["pkg/mod.py::test_e"].failures[0].location == Location("pkg/mod.py", 3)
    assert cases["pkg/mod.py::TestGroup::TestInner::test_a"].file == "pkg/mod.py"
    assert cases["pkg/mod.py::test_b"].file == "pkg/mod.py"
    assert cases["Top.py::test_c"].file == "Top.py"
    assert cases["pkg.gone.TestX::test_d"].file == ""  # no such file: the names as written


def test_durations_lines_texts_and_the_source(tmp_path: Path) -> None:
    path = tmp_path / "j.xml"
    path.write_text(
        '<testsuite name="go">'
        '<testcase classname="p" name="timed" time="2.5"/>'
        '<testcase classname="p" name="untimed"/>'
        '<testcase classname="p" name="negative" time="-1"/>'
        '<testcase classname="p" name="nan" time="nan"/>'
        '<testcase classname="p" name="word" time="abc"/>'
        '<testcase classname="p" name="zero-line"><failure message="m" file="a.go" line="0">'
        "the text</failure></testcase>"
        '<testcase classname="p" name="bad-line"><failure message="m" file="a.go" line="-3"/>'
        "</testcase>"
        "</testsuite>"
    )
    suite = read_junit(path, root=tmp_path)
    assert suite.source == str(path)
    cases = {c.nodeid: c for c in suite.cases}
    durations = [cases[f"p::{n}"].duration_s for n in ("timed", "untimed", "negative", "nan")]
    assert durations == [2.5, 0.0, 0.0, 0.0] and cases["p::word"].duration_s == 0.0
    zero = cases["p::zero-line"]
    assert zero.failures[0].location == Location("a.go", 0) and zero.text == "the text"
    assert cases["p::bad-line"].failures[0].location == Location("a.go", None)
    assert cases["p::timed"].text == ""


def test_unsafe_and_unreadable_files_say_why(tmp_path: Path) -> None:
    path = tmp_path / "j.xml"
    path.write_text('<!DOCTYPE x [<!ENTITY e "boom">]><testsuite name="a">&e;</testsuite>')
    with pytest.raises(InputError) as caught:
        read_junit(path)
    message = str(caught.value)
    assert message.startswith(f"JUnit file {path} declares a DTD or entities (")
    assert message.endswith("); stagegate does not read those in untrusted XML")
    assert "(NoneType)" not in message
    with pytest.raises(InputError) as caught:
        read_junit(tmp_path)
    assert str(caught.value).startswith(f"JUnit file {tmp_path} cannot be read: ")
