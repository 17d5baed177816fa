"""Where a failure is said to be, one rule at a time: Windows paths keep their drive letter, a
JVM stack points at the test's own class, a JavaScript stack at the test's own file (matched
part for part, not by a file name alone), never at ``node:internal`` or a dependency."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stagegate.collect import read_junit
from stagegate.collect.frames import first_frame, innermost_frame, parts
from stagegate.model import Location

PLAIN = '<testsuites><testsuite name="s" tests="1">{case}</testsuite></testsuites>'


def _location(tmp_path: Path, failure: str, attrs: str = 'classname="c"') -> Location | None:
    """The location read for one failing test case of ``attrs`` whose failure is ``failure``."""
    path = tmp_path / "junit.xml"
    path.write_text(PLAIN.format(case=f'<testcase name="t" {attrs}>{failure}</testcase>'))
    (case,) = read_junit(path, root=tmp_path).cases
    return case.location


def test_a_failure_file_with_a_drive_letter_keeps_it(tmp_path: Path) -> None:
    failure = '<failure file="C:\\work\\tests\\test_x.py" line="12">boom</failure>'
    assert _location(tmp_path, failure) == Location("C:\\work\\tests\\test_x.py", 12)
    attrs = 'classname="c" file="D:/proj/t.c" line="4"'
    assert _location(tmp_path, "<failure>boom</failure>", attrs) == Location("D:/proj/t.c", 4)


def test_a_windows_path_is_one_path_whichever_slash_it_uses() -> None:
    assert (
        parts("C:/proj/test/a.js")
        == parts("C:\\proj\\test\\a.js")
        == (
            "C:\\",
            "proj",
            "test",
            "a.js",
        )
    )
    assert parts("/ci/test/a.js") == ("/", "ci", "test", "a.js")


def test_the_tests_own_file_is_matched_across_slashes(tmp_path: Path) -> None:
    stack = (
        "Error: no\n    at helper (C:/proj/src/helper.js:3:1)\n"
        "    at Context.fn (C:/proj/test/math.test.js:5:11)"
    )
    attrs = 'classname="c" file="C:\\proj\\test\\math.test.js"'
    where = _location(tmp_path, f"<failure>{stack}</failure>", attrs)
    assert where == Location("C:/proj/test/math.test.js", 5)


# (the test's own file, its stack, where the failure is): the same file name in another folder
# comes first each time, and is not the test's file.
OWN_FILES = {
    "a relative own file": (
        "test/math.spec.js",
        "at helper (/ci/src/math.spec.js:3:1)\nat fn (/ci/test/math.spec.js:9:36)",
        Location("/ci/test/math.spec.js", 9),
    ),
    "an own path longer than the frame's": (
        "/ci/packages/a/test/math.spec.js",
        "at helper (/ci/src/math.spec.js:3:1)\nat fn (test/math.spec.js:7:2)",
        Location("test/math.spec.js", 7),
    ),
    "two absolute paths": (
        "/ci/test/math.spec.js",
        "at helper (/ci/lib/test/math.spec.js:4:1)\nat fn (/ci/test/math.spec.js:9:36)",
        Location("/ci/test/math.spec.js", 9),
    ),
}


@pytest.mark.parametrize("case", list(OWN_FILES))
def test_the_tests_own_file_is_matched_part_for_part(case: str) -> None:
    own, stack, expected = OWN_FILES[case]
    assert first_frame(stack, Path("/elsewhere"), "c", [own]) == expected


def test_a_file_name_that_only_ends_like_the_tests_is_another_file() -> None:
    stack = "at a (/ci/test/abc.spec.js:2:1)\nat b (/ci/test/c.spec.js:9:1)"
    assert first_frame(stack, Path("/x"), "c", ["c.spec.js"]) == Location("/ci/test/c.spec.js", 9)
    assert first_frame(stack, Path("/x"), "c", ["", "d.spec.js"]) == Location(
        "/ci/test/abc.spec.js", 2
    )


def test_node_internal_and_dependencies_are_never_the_place(tmp_path: Path) -> None:
    stack = (
        "node:internal/process/task_queues.js:95:5\n"
        "    at assert (/ci/node_modules/chai/lib/assert.js:40:1)\n"
        "    at node:internal/timers.js:483:21\n"
        "    at Context.fn (/ci/test/a.spec.js:9:3)"
    )
    assert first_frame(stack, tmp_path, "c", []) == Location("/ci/test/a.spec.js", 9)
    assert first_frame("at node:internal/timers.js:1:2", tmp_path, "c", []) is None


def test_a_jvm_stack_points_at_the_tests_class_and_its_inner_classes() -> None:
    stack = (
        "\tat org.junit.Assert.fail(Assert.java:89)\n"
        "\tat com.acme.CalcTestHelper.check(CalcTestHelper.java:7)\n"
        "\tat com.acme.CalcTest$Nested.check(CalcTest.java:40)\n"
        "\tat com.acme.CalcTest.adds(CalcTest.java:30)"
    )
    found = first_frame(stack, Path("/ci"), "com.acme.CalcTest", [])
    assert found == Location("CalcTest.java", 40)  # not CalcTestHelper, whose name starts alike
    other = first_frame(stack, Path("/ci"), "com.acme.OtherTest", [])
    assert other == Location("CalcTestHelper.java", 7)  # first outside the libraries
    only_libraries = "\tat org.junit.Assert.fail(Assert.java:89)"
    assert first_frame(only_libraries, Path("/ci"), "", []) == Location("Assert.java", 89)


def test_an_absolute_frame_inside_the_checkout_is_made_relative(tmp_path: Path) -> None:
    stack = f"at Context.fn ({tmp_path}/test/a.spec.js:9:3)"
    assert first_frame(stack, tmp_path, "c", []) == Location("test/a.spec.js", 9)
    url = f"at Context.fn (file://{tmp_path}/test/a.spec.js:9:3)"
    assert first_frame(url, tmp_path, "c", []) == Location("test/a.spec.js", 9)


@pytest.mark.slow
def test_a_collection_error_in_the_code_under_test_points_at_that_code(tmp_path: Path) -> None:
    """pytest writes a SyntaxError met while importing a test module in Python's own form,
    below the test file's frame: the place is the broken module's line, not the test file."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "src" / "pkg" / "mod.py").write_text("x = 1\ndef broken(:\n    pass\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("from pkg import mod\n\n\ndef test_a(): ...\n")
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:stagegate",
         "--junitxml=junit.xml", "tests"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": "src"}, capture_output=True, check=False,
    )  # fmt: skip
    (case,) = read_junit(tmp_path / "junit.xml", root=tmp_path).cases
    assert case.location == Location("src/pkg/mod.py", 2)


@pytest.mark.slow
def test_a_line_number_of_thousands_of_digits_leaves_the_file_readable(tmp_path: Path) -> None:
    """A real pytest run whose failure quotes a frame with a 5000-digit line number: no frame is
    read from it (the digits are bounded) and every test of the file is still read."""
    nines = "9" * 5000
    (tmp_path / "test_long.py").write_text(
        "def test_long():\n"
        "    raise AssertionError('File \"x.py\", line ' + '9' * 5000)\n\n"
        "def test_ok():\n    pass\n"
    )
    junit = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert f"line {nines}" in junit.read_text()
    cases = {c.name: c for c in read_junit(junit, root=tmp_path).cases}
    assert cases["test_ok"].outcome == "passed"
    assert cases["test_long"].outcome == "failed"
    assert cases["test_long"].location == Location("test_long.py", 2)


def test_a_relative_frame_that_climbs_out_of_the_checkout_is_not_ours(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b"
    root.mkdir(parents=True)
    text = "tests/test_x.py:7: in test_x\n../../../../etc/shadow.py:1: AssertionError"
    assert innermost_frame(text, root) == Location("tests/test_x.py", 7)
    assert innermost_frame("sub/../tests/t.py:3: in t\nsub/../../up.py:1: E", root) == Location(
        "sub/../tests/t.py", 3
    )


def test_a_long_run_of_path_characters_is_read_once_not_once_a_character() -> None:
    # 'a.a.a...' with no ':' after it: each start used to rescan the rest (quadratic: minutes
    # at this length); SIGALRM turns such a hang into a failure, far above the milliseconds it
    # takes when each path is scanned once
    import signal

    def hung(*_: object) -> None:
        raise TimeoutError("first_frame scanned the text once for each of its characters")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        text = "a." * 40_000 + "\n  at src/x.cpp:7"
        assert first_frame(text, Path("."), None, ["src/x.cpp"]) == Location("src/x.cpp", 7)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
