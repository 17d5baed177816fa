"""One JUnit element at a time: failure kinds and messages, re-runs, statuses written as
attributes, and pytest names turned back into node ids; a real pytest run read whole; which
traceback frame a failure is placed at; files that cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagegate.collect import read_junit
from stagegate.collect.junit import innermost_frame, last_frame
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
    assert cases["bare"].outcome == "passed"
    assert cases["pkg::(unnamed testcase 6)"].name == ""
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


def _by_name(suite: object) -> dict:
    return {c.name: c for c in suite.cases}  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["xunit1", "xunit2"])
def test_junit_from_a_real_pytest_run(tmp_path: Path, family: str, sample_project) -> None:
    suite = read_junit(sample_project(tmp_path, family)["junit"], root=tmp_path)
    cases = _by_name(suite)
    assert cases["test_passes"].outcome == "passed"
    assert cases["test_passes"].nodeid == "test_sample.py::test_passes"
    assert cases["test_method"].nodeid == "test_sample.py::TestGroup::test_method"
    failed = cases["test_fails"]
    assert failed.outcome == "failed" and "assert [1, 2] == [1, 3]" in failed.message
    assert failed.location == Location("test_sample.py", 9)
    raised = cases["test_raises_in_library"]
    assert raised.outcome == "failed" and "KeyError" in raised.message
    assert raised.location == Location("helper.py", 2)  # the raising line, not the test
    assert (
        cases["test_skipped"].outcome == "skipped" and cases["test_skipped"].message == "needs CUDA"
    )
    assert cases["test_fixture_error"].outcome == "error"
    collection = [c for c in suite.cases if "broken_import" in c.nodeid]
    assert len(collection) == 1 and collection[0].outcome == "error"
    assert suite.count("passed") == 3 and suite.count("failed") == 2


def test_last_frame_of_short_and_long_tracebacks() -> None:
    short = (
        "test_x.py:3: in test_a\n    f()\nsrc/pkg/m.py:80: in f\n    env['x']\nE   KeyError: 'x'"
    )
    long = "def test_a():\n>   f()\n\ntest_x.py:3: \n...\nsrc/pkg/m.py:80: KeyError"
    assert last_frame(short) == last_frame(long) == Location("src/pkg/m.py", 80)
    assert last_frame("no frames here") is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"", "is empty"),
        (b"<testsuites><testcase", "not well-formed"),
        (b"<html></html>", "not <testsuites>"),
    ],
)
def test_unusable_junit_is_an_input_error(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "junit.xml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        read_junit(path)


def test_an_empty_but_valid_junit_file_has_no_cases(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text('<testsuites><testsuite name="pytest" tests="0"/></testsuites>')
    assert read_junit(path).cases == ()


FRAMES = """
tests/test_a.py:10: in test_a
    run()
src/pkg/core.py:20: in run
    step()
{root}/src/pkg/inner.py:30: in step
    lib()
.venv/lib/python3.11/site-packages/lib/x.py:40: in lib
    raise ValueError
/usr/lib/python3.11/other.py:50: ValueError
"""


def test_the_innermost_frame_in_the_checkout(tmp_path: Path) -> None:
    text = FRAMES.format(root=tmp_path)
    assert innermost_frame(text, root=tmp_path) == Location("src/pkg/inner.py", 30)
    # Frames outside the checkout only: the innermost of them all.
    deps = ".venv/lib/site-packages/a/b.py:5: in f\n/usr/lib/c.py:7: Error\n"
    assert innermost_frame(deps, root=tmp_path) == Location("/usr/lib/c.py", 7)
    assert innermost_frame("", root=tmp_path) is None


def test_the_last_frame_wherever_it_is(tmp_path: Path) -> None:
    assert last_frame(FRAMES.format(root=tmp_path)) == Location("/usr/lib/python3.11/other.py", 50)
