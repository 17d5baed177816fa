"""Property tests: random, truncated and hostile JUnit never crashes the report, and a test
that failed in any attempt never ends in PASS."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stagegate.errors import InputError
from stagegate.report import ReportOptions, build_report

POLICY = '[tool.stagegate]\nrequired = ["execution"]\n'
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20)
ATTRS = st.one_of(NAMES, st.integers(-5, 10**6).map(str), st.just("nan"))
OUTCOMES = st.sampled_from(["pass", "failure", "error", "skipped", "disabled", "flaky"])


# Few names, so one test often appears several times (re-runs); and any text at all.
TEST_NAMES = st.one_of(st.just("a"), st.just("a"), st.just("b"), NAMES)


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, str, str, str]:
    return (
        draw(TEST_NAMES),
        draw(TEST_NAMES),
        draw(OUTCOMES),
        draw(ATTRS),  # line
        draw(ATTRS),  # time
    )


def _case_xml(classname: str, name: str, outcome: str, line: str, time: str) -> str:
    attrs = f"classname={quoteattr(classname)} name={quoteattr(name)} "
    attrs += f"line={quoteattr(line)} time={quoteattr(time)}"
    body = {
        "pass": "",
        "failure": f"<failure message={quoteattr(name)}>{escape(classname)}</failure>",
        "error": "<error>x.py:1: boom</error>",
        "skipped": "<skipped/>",
        "disabled": "<failure>an old failure</failure>",
        "flaky": "<flakyFailure>timing</flakyFailure>",
    }[outcome]
    status = ' status="disabled"' if outcome == "disabled" else ""
    return f"<testcase {attrs}{status}>{body}</testcase>"


def _document(suites: list[tuple[str, str, list[tuple[str, str, str, str, str]]]]) -> str:
    parts = ['<?xml version="1.0" encoding="UTF-8"?><testsuites>']
    for name, declared, items in suites:
        parts.append(f"<testsuite name={quoteattr(name)} tests={quoteattr(declared)}>")
        parts.extend(_case_xml(*c) for c in items)
        parts.append("</testsuite>")
    parts.append("</testsuites>")
    return "".join(parts)


SUITES = st.lists(st.tuples(NAMES, ATTRS, st.lists(cases(), max_size=8)), max_size=3)


def _report(junit: bytes) -> str | None:
    """The decision of a report whose one required stage left ``junit``; None for exit 2."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        raw = root / "raw"
        raw.mkdir()
        (raw / "junit.xml").write_bytes(junit)
        record = {
            "format_version": 2,
            "kind": "stagegate-record",
            "stage": "execution",
            "command": ["runner"],
            "exit_code": 0,
            "start": "2026-01-05T10:00:00Z",
            "duration_s": 1.0,
            "files": {"junit": str(raw / "junit.xml")},
            "out_dir": str(raw),
            "sha256": {str(raw / "junit.xml"): hashlib.sha256(junit).hexdigest()},
        }
        (raw / "execution.json").write_text(json.dumps(record))
        (root / "pyproject.toml").write_text(POLICY)
        pyproject = root / "pyproject.toml"
        options = ReportOptions(raw_dir=raw, out_dir=root / "out", pyproject=pyproject)
        try:
            verdict, files = build_report(options, {})
        except InputError:
            return None
        assert set(files) >= {"summary.md", "execution.md", "verdict.json"}
        return verdict.decision.value


def _failed_anywhere(suites: list) -> bool:
    # Worst result wins: any attempt of any test that failed or errored (a disabled case that
    # carries a <failure> included), whatever other attempts or markers say.
    return any(
        outcome in ("failure", "error", "disabled")
        for _, _, items in suites
        for _, _, outcome, _, _ in items
    )


FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@FAST
@given(SUITES)
def test_random_junit_never_crashes_and_a_failure_never_passes(suites: list) -> None:
    decision = _report(_document(suites).encode("utf-8"))
    assert decision in ("PASS", "BLOCK")
    if _failed_anywhere(suites):
        assert decision == "BLOCK"


@pytest.mark.slow
@FAST
@given(SUITES, st.floats(0, 1))
def test_truncated_junit_never_crashes_and_never_passes_a_failure(suites: list, cut: float) -> None:
    data = _document(suites).encode("utf-8")
    decision = _report(data[: int(len(data) * cut)])
    assert decision in ("PASS", "BLOCK")
    if _failed_anywhere(suites) and cut < 1:
        assert decision == "BLOCK"


@pytest.mark.slow
@FAST
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash_the_report(data: bytes) -> None:
    assert _report(data) in ("PASS", "BLOCK")


@FAST
@given(
    st.sampled_from(["<!DOCTYPE a [<!ENTITY e 'x'>]>", '<!DOCTYPE a SYSTEM "file:///etc/passwd">'])
)
def test_dtds_and_entities_are_refused(prolog: str) -> None:
    data = f"<?xml version='1.0'?>{prolog}<testsuite><testcase name='&e;'/></testsuite>"
    assert _report(data.encode()) == "BLOCK"
