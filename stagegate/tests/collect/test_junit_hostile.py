"""JUnit written to hide a failure: each shape below holds a test that failed, and the gate
must count it failed (or errored) and BLOCK, never pass it, call it flaky or skip it. The
locations of failures in Windows, JVM and JavaScript stacks point at the test's own code."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagegate.collect import read_junit
from stagegate.judge import decide, judge_stage
from stagegate.judge.policy import Policy
from stagegate.model import Decision, Location, StageData, TestSuite

from ..builders import record

PYTEST = (
    '<testsuites name="pytest tests"><testsuite name="pytest" tests="{n}">{body}'
    "</testsuite></testsuites>"
)
PLAIN = '<testsuites><testsuite name="s" tests="{n}">{body}</testsuite></testsuites>'
FAIL = '<failure message="boom">assert 1 == 2</failure>'

# (what the attack is, document, number of tests, the test that failed)
ATTACKS = {
    "nameless cases merged into one flaky test": (
        PYTEST,
        f"<testcase>{FAIL}</testcase><testcase/>",
        2,
        "(unnamed testcase 1)",
    ),
    "nameless cases with a classname": (
        PLAIN,
        f'<testcase classname="pkg">{FAIL}</testcase><testcase classname="pkg"/>',
        2,
        "pkg::(unnamed testcase 1)",
    ),
    "skipped and a teardown error (pytest's shape)": (
        PYTEST,
        '<testcase classname="tests.mod" name="test_x"><skipped message="later"/>'
        '<error message="failed on teardown">RuntimeError</error></testcase>',
        1,
        "tests.mod::test_x",
    ),
    "a disabled case that carries a failure": (
        PLAIN,
        f'<testcase classname="c" name="t" status="disabled">{FAIL}</testcase>'
        '<testcase classname="c" name="u"/>',
        2,
        "c::t",
    ),
    "a skipped result attribute beside a failure": (
        PLAIN,
        f'<testcase classname="c" name="t" result="skipped">{FAIL}</testcase>'
        '<testcase classname="c" name="u"/>',
        2,
        "c::t",
    ),
    "parametrized tests sharing a name, one failing": (
        PLAIN,
        '<testcase classname="c" name="test_p"/>'
        f'<testcase classname="c" name="test_p">{FAIL}</testcase>'
        '<testcase classname="c" name="test_p"/>',
        1,
        "c::test_p",
    ),
    "a failure, then a pass of the same pytest test (no re-run evidence)": (
        PYTEST,
        f'<testcase classname="tests.mod" name="test_a">{FAIL}</testcase>'
        '<testcase classname="tests.mod" name="test_a"/>',
        1,
        "tests.mod::test_a",
    ),
    "the same name in two suites, the failing one first": (
        "<testsuites>{body}</testsuites>",
        f'<testsuite name="a"><testcase classname="c" name="t">{FAIL}</testcase></testsuite>'
        '<testsuite name="b"><testcase classname="c" name="t"/></testsuite>',
        2,
        "c::t (#1 in a)",
    ),
    "a failed subtest written before its passing test (pytest-subtests)": (
        PYTEST,
        f'<testcase classname="tests.mod" name="test_sub">{FAIL}</testcase>'
        '<testcase classname="tests.mod" name="test_sub"/>',
        1,
        "tests.mod::test_sub",
    ),
    "a rerunFailure with no final failure": (
        PLAIN,
        '<testcase classname="c" name="t"><rerunFailure message="again"/></testcase>',
        1,
        "c::t",
    ),
    "a flakyFailure beside a final failure": (
        PLAIN,
        f'<testcase classname="c" name="t"><flakyFailure message="f"/>{FAIL}</testcase>',
        1,
        "c::t",
    ),
    "named cases without a classname, the failing one first": (
        PLAIN,
        f'<testcase name="t">{FAIL}</testcase><testcase name="t"/>',
        2,
        "t (#1 in s)",
    ),
    "the same test name in two files of one suite (Jest, Mocha), the failing one first": (
        PLAIN,
        f'<testcase classname="c" name="t" file="a.test.js">{FAIL}</testcase>'
        '<testcase classname="c" name="t" file="b.test.js"/>',
        2,
        "c::t (#1 in s)",
    ),
    "a status attribute that says failed, with no element": (
        PLAIN,
        '<testcase classname="c" name="t" status="failed"/><testcase classname="c" name="u"/>',
        2,
        "c::t",
    ),
}


def _read(tmp_path: Path, template: str, body: str, n: int = 9) -> TestSuite:
    path = tmp_path / "junit.xml"
    path.write_text(template.replace("{n}", str(n)).replace("{body}", body))
    return read_junit(path, root=tmp_path)


def _decision(suite: TestSuite) -> Decision:
    # the runner said it passed (exit 0): the file alone must decide
    data = StageData(record(files={"junit": "junit.xml"}), suite=suite)
    return decide([judge_stage("execution", data, Policy())]).decision


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_hidden_failure_is_counted_failed_and_blocks(attack: str, tmp_path: Path) -> None:
    template, body, tests, failing = ATTACKS[attack]
    suite = _read(tmp_path, template, body, n=tests)
    cases = {c.nodeid: c for c in suite.cases}
    assert len(suite.cases) == tests, sorted(cases)
    assert cases[failing].outcome in ("failed", "error")
    assert suite.count("flaky") == 0
    assert _decision(suite) is Decision.BLOCK


def test_the_pytest_9_subtests_shape_keeps_every_failure(tmp_path: Path) -> None:
    # pytest 9 writes a failed subtest and its test's own report into one <testcase>.
    body = (
        '<testcase classname="tests.mod" name="test_sub"><failure message="assert 1 != 1">t.py:6: '
        'AssertionError</failure><failure message="contains 1 failed subtest"/></testcase>'
    )
    (case,) = _read(tmp_path, PYTEST, body).cases
    assert case.outcome == "failed"
    assert [f.message for f in case.failures] == ["assert 1 != 1", "contains 1 failed subtest"]


def test_a_documented_rerun_is_flaky_and_does_not_block(tmp_path: Path) -> None:
    body = '<testcase classname="c" name="t"><flakyFailure message="timeout"/></testcase>'
    suite = _read(tmp_path, PLAIN, body, n=1)
    assert [c.outcome for c in suite.cases] == ["flaky"]
    assert _decision(suite) is Decision.PASS


def test_distinct_tests_sharing_a_node_id_are_told_apart(tmp_path: Path) -> None:
    _, body, _, _ = ATTACKS["the same name in two suites, the failing one first"]
    suite = _read(tmp_path, "<testsuites>{body}</testsuites>", body)
    assert {c.nodeid: c.outcome for c in suite.cases} == {
        "c::t (#1 in a)": "failed",
        "c::t (#2 in b)": "passed",
    }
    assert [c.suite for c in suite.cases] == ["a", "b"]


STACKS = {
    "a Windows pytest traceback keeps its drive": (
        PYTEST,
        "C:\\work\\tests\\test_x.py:12: AssertionError",
        "",
        Location("C:\\work\\tests\\test_x.py", 12),
    ),
    "a Windows JavaScript stack keeps its drive": (
        PLAIN,
        "Error: no\n    at Object.&lt;anonymous&gt; (C:\\proj\\test\\math.test.js:5:11)",
        "",
        Location("C:\\proj\\test\\math.test.js", 5),
    ),
    "a JVM stack points at the test's class, not the assertion library": (
        PLAIN,
        "java.lang.AssertionError: expected 1\n"
        "\tat org.junit.Assert.fail(Assert.java:89)\n"
        "\tat org.junit.Assert.assertEquals(Assert.java:146)\n"
        "\tat com.acme.util.Helper.check(Helper.java:7)\n"
        "\tat com.acme.CalcTest.lambda$adds$0(CalcTest.java:31)\n"
        "\tat com.acme.CalcTest.adds(CalcTest.java:30)",
        'classname="com.acme.CalcTest"',
        Location("CalcTest.java", 31),
    ),
    "a JVM stack of another class: the first frame outside the libraries": (
        PLAIN,
        "\tat org.opentest4j.AssertionFailedError.x(AssertionFailedError.java:1)\n"
        "\tat com.acme.util.Helper.check(Helper.java:7)",
        'classname="com.acme.OtherTest"',
        Location("Helper.java", 7),
    ),
    "a node stack skips node:internal and picks the test's file": (
        PLAIN,
        "AssertionError: no\n    at node:internal/deps/undici/undici.js:1:2\n"
        "    at helper (/ci/src/helper.js:3:1)\n"
        "    at Context.&lt;anonymous&gt; (file:///ci/test/math.spec.js:5:36)",
        'file="/ci/test/math.spec.js"',
        Location("/ci/test/math.spec.js", 5),
    ),
    "a node stack without a known file: the first frame outside the runtime": (
        PLAIN,
        "Error: no\n    at process.processImmediate (node:internal/timers.js:483:21)\n"
        "    at Context.fn (test/a.spec.js:9:3)",
        "",
        Location("test/a.spec.js", 9),
    ),
}


@pytest.mark.parametrize("stack", list(STACKS))
def test_a_failure_points_at_the_tests_own_code(stack: str, tmp_path: Path) -> None:
    template, text, attrs, where = STACKS[stack]
    attrs = attrs or 'classname="c"'
    body = f'<testcase name="t" {attrs}><failure>{text}</failure></testcase>'
    (case,) = _read(tmp_path, template, body).cases
    assert case.location == where
