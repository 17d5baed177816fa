"""pytest JUnit XML: every test's outcome, duration, skip reason, failure message and location."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from stagegate.errors import InputError
from stagegate.model import Location, TestCase, TestSuite

# "src/pkg/mod.py:80: KeyError" (long tracebacks) or "src/pkg/mod.py:80: in func" (short ones).
_FRAME = re.compile(r"^(?P<file>[^\s:][^:\n]*\.py):(?P<line>\d+): ", re.MULTILINE)


def _module_and_class(classname: str) -> tuple[str, str]:
    # "tests.pkg.test_mod.TestThing" -> ("tests/pkg/test_mod.py", "TestThing")
    parts = classname.split(".") if classname else []
    split = len(parts)
    while split > 1 and parts[split - 1][:1].isupper():
        split -= 1
    module = "/".join(parts[:split])
    return (f"{module}.py" if module else ""), "::".join(parts[split:])


def last_frame(text: str) -> Location | None:
    """The innermost ``file.py:line`` of a pytest traceback: where the error was raised."""
    frames = list(_FRAME.finditer(text or ""))
    if not frames:
        return None
    last = frames[-1]
    return Location(last["file"], int(last["line"]))


def _case(element: ET.Element) -> TestCase:
    file, cls = _module_and_class(element.get("classname", ""))
    name = element.get("name", "?")
    file = element.get("file") or file
    nodeid = "::".join(p for p in (file, cls, name) if p)
    try:
        duration = float(element.get("time", "0") or 0)
    except ValueError:
        duration = 0.0
    outcome, message, text, location = "passed", "", "", None
    for tag, kind in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        child = element.find(tag)
        if child is not None:
            outcome = kind
            message = child.get("message", "") or ""
            text = child.text or ""
            location = last_frame(text)
            break
    if outcome == "error" and not file:  # a collection error names the module as the test
        nodeid = name
    if location is None and element.get("line") and file:
        location = Location(file, int(element.get("line", "0")) + 1)
    return TestCase(
        nodeid=nodeid,
        file=file,
        name=name,
        outcome=outcome,
        duration_s=duration,
        message=message,
        text=text,
        location=location,
    )


def read_junit(path: Path) -> TestSuite:
    """Parse a JUnit XML file; a missing, empty or malformed file is an InputError."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"JUnit file {path} does not exist: did the test command run?") from None
    if not data.strip():
        raise InputError(f"JUnit file {path} is empty: the test run was cut off before the end")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise InputError(f"JUnit file {path} is not well-formed XML ({exc})") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise InputError(f"JUnit file {path} has root <{root.tag}>, not <testsuites>/<testsuite>")
    return TestSuite(cases=tuple(_case(tc) for tc in root.iter("testcase")), source=str(path))
