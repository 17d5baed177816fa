"""JUnit XML from any producer: outcomes, retries, skip reasons, every failure and its location.

The file may come from a fork's pull request, so it is parsed by defusedxml (no DTD, no entity
expansion, no external references) and streamed: each ``<testcase>`` is read, turned into a
small record and dropped from the tree, so a 100 MB file needs no 100 MB tree.
"""

from __future__ import annotations

import math
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import defusedxml
import defusedxml.ElementTree as SafeET

from stagegate.errors import InputError, MissingFileError
from stagegate.model import Failure, Location, TestCase, TestSuite

TEXT_LIMIT = 16_000  # characters kept of one failure's text; the file keeps the rest
# A test status or result that means "not run" (GoogleTest's notrun/suppressed, XCTest exports).
_NOT_RUN = {"disabled", "notrun", "not_run", "skipped", "suppressed", "ignored", "pending"}
_DEPENDENCY_DIRS = {"site-packages", "dist-packages", "node_modules", ".nox", ".venv", ".tox"}
# pytest's traceback lines: "src/pkg/mod.py:80: KeyError" or "src/pkg/mod.py:80: in func".
_PYTEST_FRAME = re.compile(r"^(?P<file>[^\s:][^:\n]*\.py):(?P<line>\d+): ", re.MULTILINE)
# Any other producer: "file.ext:LINE" (GoogleTest, Catch2's "at f.cpp:5", JavaScript stacks).
_ANY_FRAME = re.compile(r"(?P<file>[\w./\\-]+\.[A-Za-z]\w{0,5}):(?P<line>\d+)")


@dataclass
class _Context:
    """What the reader knows about the file while streaming it."""

    path: Path
    root: Path
    pytest: bool = False  # pytest's 0-based line numbers and dotted module classnames
    mismatches: list[str] = field(default_factory=list)


def _int(value: str | None) -> int | None:
    """An attribute as a non-negative integer; anything else (``line="abc"``) is unknown."""
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def _in_dependency(file: str) -> bool:
    return bool(_DEPENDENCY_DIRS.intersection(Path(file).parts))


def _relative(file: str, root: Path) -> str:
    """``file`` relative to the checkout when it lies inside it, else as written."""
    if os.path.isabs(file):
        try:
            return str(Path(file).resolve().relative_to(root))
        except (ValueError, OSError):
            return file
    return file


def _in_repo(file: str, root: Path) -> bool:
    return not os.path.isabs(_relative(file, root)) and not _in_dependency(file)


def innermost_frame(text: str, root: Path | None = None) -> Location | None:
    """The innermost frame of a pytest traceback that lies in the checkout (not in a
    dependency); the innermost frame of all when none does."""
    root = root or Path.cwd()
    frames = [
        Location(_relative(m["file"], root), int(m["line"]))
        for m in _PYTEST_FRAME.finditer(text or "")
    ]
    ours = [f for f in frames if _in_repo(f.file, root)]
    return (ours or frames or [None])[-1]


def last_frame(text: str) -> Location | None:
    """The innermost ``file.py:line`` of a pytest traceback, wherever it is."""
    frames = list(_PYTEST_FRAME.finditer(text or ""))
    return Location(frames[-1]["file"], int(frames[-1]["line"])) if frames else None


def _first_frame(text: str, root: Path) -> Location | None:
    # Other producers print the failing line first (GoogleTest, Catch2) or innermost first
    # (JavaScript stacks): the first frame outside the dependencies is the place to look.
    for m in _ANY_FRAME.finditer(text or ""):
        if not _in_dependency(m["file"]):
            return Location(_relative(m["file"], root), int(m["line"]))
    return None


def _case_location(case: ET.Element, ctx: _Context) -> Location | None:
    file = case.get("file")
    line = _int(case.get("line"))
    if not file:
        return None
    if line is not None and ctx.pytest:
        line += 1  # pytest writes 0-based line numbers; every other producer 1-based
    return Location(_relative(file, ctx.root), line or None)


def _failure(child: ET.Element, case: ET.Element, ctx: _Context) -> Failure:
    message = child.get("message") or ""
    text = "".join(child.itertext())[:TEXT_LIMIT]  # Surefire nests <stackTrace> inside
    location = None
    if child.get("file"):
        location = Location(_relative(child.get("file", ""), ctx.root), _int(child.get("line")))
    elif ctx.pytest:
        location = innermost_frame(text, ctx.root)
    else:
        location = _first_frame(f"{message}\n{text}", ctx.root)
    location = location or _case_location(case, ctx)
    kind = "error" if child.tag in ("error", "rerunError", "flakyError") else "failure"
    return Failure(kind, message or text.strip().split("\n", 1)[0][:500], text, location)


def _nodeid(case: ET.Element, ctx: _Context) -> tuple[str, str]:
    """(nodeid, file): pytest's ``path.py::Class::name`` when that file is in the checkout,
    else the names as the producer wrote them."""
    classname, name = case.get("classname") or "", case.get("name") or "?"
    file = case.get("file") or ""
    if ctx.pytest and classname:
        parts = classname.split(".")
        split = len(parts)
        while split > 1 and parts[split - 1][:1].isupper():
            split -= 1
        module = "/".join(parts[:split]) + ".py"
        if (ctx.root / (file or module)).is_file():
            file = file or module
            return "::".join(p for p in (file, "::".join(parts[split:]), name) if p), file
    if not classname or classname in name:
        return name, file
    return f"{classname}::{name}", file


def _outcome(case: ET.Element, ctx: _Context) -> tuple[str, str, tuple[Failure, ...], int]:
    """(outcome, message, failures, attempts) of one ``<testcase>`` element."""
    status = {(case.get("status") or "").lower(), (case.get("result") or "").lower()}
    skipped = case.find("skipped")
    if status & _NOT_RUN or skipped is not None:
        reason = ""
        if skipped is not None:
            reason = skipped.get("message") or (skipped.text or "").strip()
        not_run = sorted(status & _NOT_RUN)
        return "skipped", reason or (f"status {not_run[0]}" if not_run else ""), (), 1
    failed = tuple(_failure(c, case, ctx) for c in case if c.tag in ("failure", "error"))
    reruns = tuple(_failure(c, case, ctx) for c in case if c.tag in ("rerunFailure", "rerunError"))
    if failed:
        outcome = "failed" if any(f.kind == "failure" for f in failed) else "error"
        return outcome, failed[0].message, failed + reruns, 1 + len(reruns)
    flaky = tuple(_failure(c, case, ctx) for c in case if c.tag in ("flakyFailure", "flakyError"))
    if flaky:  # Surefire and nextest: failed, then passed on a re-run
        return "flaky", flaky[0].message, flaky, 1 + len(flaky)
    return "passed", "", (), 1


def _case(case: ET.Element, ctx: _Context) -> TestCase:
    nodeid, file = _nodeid(case, ctx)
    outcome, message, failures, attempts = _outcome(case, ctx)
    try:
        duration = float(case.get("time") or 0)
    except ValueError:
        duration = 0.0
    duration = duration if math.isfinite(duration) and duration > 0 else 0.0
    first = failures[0] if failures else None
    location = first.location if first else _case_location(case, ctx)
    if outcome == "error" and not file and not case.get("classname"):
        nodeid = case.get("name") or "?"  # a collection error names the module as the test
    return TestCase(
        nodeid=nodeid,
        file=file,
        name=case.get("name") or "?",
        outcome=outcome,
        duration_s=duration,
        message=message,
        text=first.text if first else "",
        location=location,
        failures=failures,
        attempts=attempts,
    )


def merge_attempts(attempts: list[TestCase], pytest: bool) -> TestCase:
    """One test recorded several times in one file (re-runs, ``go test -count``) is one case.

    It failed if no attempt passed, and is flaky if one failed and another passed. pytest
    writes a test twice only when pytest-rerunfailures re-ran it after a failure, so a
    repeated pytest test is flaky even when the failed attempt left no ``<failure>``.
    """
    if len(attempts) == 1:
        return attempts[0]
    ran = [a for a in attempts if a.executed] or attempts
    bad = [a for a in ran if a.outcome in ("failed", "error")]
    good = [a for a in ran if a.outcome in ("passed", "flaky")]
    failures = tuple(f for a in ran for f in a.failures)
    count = sum(a.attempts for a in attempts)
    duration = sum(a.duration_s for a in attempts)
    if bad and not good:
        return replace(bad[-1], failures=failures, attempts=count, duration_s=duration)
    if bad or (good and pytest) or any(a.outcome == "flaky" for a in good):
        first = failures[0] if failures else None
        return replace(
            good[-1],
            outcome="flaky",
            message=first.message if first else "re-run after a failure the file does not hold",
            text=first.text if first else "",
            location=first.location if first else good[-1].location,
            failures=failures,
            attempts=count,
            duration_s=duration,
        )
    return replace(ran[-1], attempts=count, duration_s=duration)


def _events(path: Path) -> Iterator[tuple[str, ET.Element]]:
    yield from SafeET.iterparse(str(path), events=("start", "end"), forbid_dtd=True)


def _stream(ctx: _Context) -> dict[tuple[str, ...], list[TestCase]]:
    """Every test case of the file, grouped by (suite, classname, name), in file order."""
    grouped: dict[tuple[str, ...], list[TestCase]] = {}
    open_: list[ET.Element] = []
    suites: list[list] = []  # [name, declared, held] of each open <testsuite>
    for event, elem in _events(ctx.path):
        if event == "start":
            if not open_ and elem.tag not in ("testsuites", "testsuite"):
                raise InputError(
                    f"JUnit file {ctx.path} has root <{elem.tag}>, not <testsuites> or "
                    "<testsuite>: it is not JUnit XML"
                )
            if elem.tag in ("testsuites", "testsuite") and elem.get("name") in (
                "pytest tests",
                "pytest",
            ):
                ctx.pytest = True
            if elem.tag == "testsuite":
                suites.append([elem.get("name") or "", _int(elem.get("tests")), 0])
            open_.append(elem)
            continue
        open_.pop()
        parent = open_[-1] if open_ else None
        if elem.tag == "testcase":
            suite_name = suites[-1][0] if suites else ""
            key = (suite_name, elem.get("classname") or "", elem.get("name") or "")
            grouped.setdefault(key, []).append(_case(elem, ctx))
            for suite in suites:
                suite[2] += 1
        elif elem.tag == "testsuite":
            name, declared, held = suites.pop()
            if declared is not None and held < declared:
                ctx.mismatches.append(
                    f"suite {name or '(unnamed)'} declares {declared} tests; the file holds {held}"
                )
        if parent is not None and (
            elem.tag in ("testcase", "testsuite") or parent.tag in ("testsuite", "testsuites")
        ):
            parent.remove(elem)  # keep memory flat: this element has been read
    return grouped


def read_junit(path: Path, root: Path | None = None) -> TestSuite:
    """Read a JUnit XML file written by any producer; an unusable file is an InputError that
    names the file and what is wrong with it (parse errors with line and column)."""
    ctx = _Context(path=path, root=(root or Path.cwd()).resolve())
    try:
        if path.stat().st_size == 0:
            raise InputError(f"JUnit file {path} is empty: the test run was cut off before the end")
    except FileNotFoundError:
        raise MissingFileError(
            f"JUnit file {path} does not exist: did the test command run?"
        ) from None
    try:
        grouped = _stream(ctx)
    except ET.ParseError as exc:
        line, column = exc.position
        reason = str(exc).split(":")[0]
        raise InputError(
            f"JUnit file {path} is not well-formed XML: {reason} at line {line}, column {column}"
        ) from None
    except defusedxml.DefusedXmlException as exc:
        raise InputError(
            f"JUnit file {path} declares a DTD or entities ({type(exc).__name__}); "
            "stagegate does not read those in untrusted XML"
        ) from None
    except OSError as exc:
        raise InputError(f"JUnit file {path} cannot be read: {exc}") from None
    cases = tuple(merge_attempts(a, ctx.pytest) for a in grouped.values())
    return TestSuite(cases=cases, source=str(path), count_mismatches=tuple(ctx.mismatches))
