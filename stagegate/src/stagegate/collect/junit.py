"""JUnit XML from any producer: outcomes, retries, skip reasons, every failure and its location.

The file may come from a fork's pull request, so it is parsed by defusedxml (no DTD, no entity
expansion, no external references) and streamed: each ``<testcase>`` is read, turned into a
small record and dropped from the tree, so a 100 MB file needs no 100 MB tree.

Worst result wins, as the peer reporters (publish-unit-test-result-action, test-reporter,
action-junit-report) count it: a ``<failure>`` or ``<error>`` outranks a skip or disable marker
on the same case, and a test written several times is failed when any attempt failed. A test
is flaky only on the re-run evidence its producer documents: Surefire's and nextest's
``<flakyFailure>``/``<flakyError>`` (failed, then passed on a re-run).
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import defusedxml
import defusedxml.ElementTree as SafeET

from stagegate.collect.frames import first_frame, innermost_frame, last_frame, relative
from stagegate.collect.jsonfile import load_json
from stagegate.errors import InputError, MissingFileError
from stagegate.model import Dated, Failure, Location, TestCase, TestSuite

__all__ = [
    "PytestCounts",
    "innermost_frame",
    "last_frame",
    "merge_attempts",
    "read_junit",
    "read_pytest_counts",
]

TEXT_LIMIT = 16_000  # characters kept of one failure's text; the file keeps the rest
# A test status or result that means "not run" (GoogleTest's notrun/suppressed, XCTest exports).
_NOT_RUN = {"disabled", "notrun", "not_run", "skipped", "suppressed", "ignored", "pending"}
_STATUS = {"fail": "failed", "failed": "failed", "failure": "failed", "error": "error"}
_STATUS |= {"errored": "error", "broken": "error", **dict.fromkeys(_NOT_RUN, "skipped")}
# Worst first: the outcome of a test written several times is its worst attempt's.
RANK = {"error": 4, "failed": 3, "flaky": 2, "passed": 1, "skipped": 0}
_WORD_RANK = {word: RANK[outcome] for word, outcome in _STATUS.items()}
_UNKNOWN_WORD = -1  # below every outcome: a word no producer documents claims nothing
_FINAL = ("failure", "error")
_RERUN = ("rerunFailure", "rerunError")  # Surefire/nextest: a re-run that failed again
_FLAKY = ("flakyFailure", "flakyError")  # Surefire/nextest: a failed run, later passed


# A count a suite declares, and the element of the file that holds each one. Every producer's
# totals are checked, at every level: one that claims more than its elements hold lost tests
# (a test that lost its <skipped> reads as passed). A count that is no whole number is no claim
# that can be checked: it is reported as such.
_DECLARED = {"tests": "testcase", "failures": "failure", "errors": "error", "skipped": "skipped"}


@dataclass
class _Suite:
    """An open ``<testsuites>`` or ``<testsuite>``: its tag, name, place in the file, the counts
    it declares (``tests``, ``failures``, ``errors``) and the elements it holds."""

    tag: str
    name: str
    ordinal: int
    file: str = ""
    declared: dict[str, int | str | None] = field(default_factory=dict)  # str: no count
    held: Counter[str] = field(default_factory=Counter)


@dataclass
class _Context:
    """What the reader knows about the file while streaming it."""

    path: Path
    root: Path
    # Subtest reports pytest counted in tests= but wrote into their test's element, as
    # stagegate's pytest plugin counted them beside the file; without its count, none
    subtest_reports: int = 0
    raised: frozenset[tuple[str, str]] = frozenset()  # the plugin saw these tests raise
    recovered: frozenset[tuple[str, str]] = frozenset()  # ... these raise, then pass
    seen_raised: set[tuple[str, str]] = field(default_factory=set)  # ... and read them here
    raised_ids: set[str] = field(default_factory=set)  # ... those read, by node id
    pytest: bool = False  # pytest's 0-based line numbers and dotted module classnames
    mismatches: list[str] = field(default_factory=list)
    suites: int = 0  # <testsuite> elements opened so far
    cases: int = 0  # <testcase> elements read so far
    dated: Dated = field(default_factory=Dated)  # the suites' timestamps and times


def _int(value: str | None) -> int | None:
    """An attribute as a non-negative integer; anything else (``line="abc"``) is unknown."""
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def _count(value: str | None) -> int | str | None:
    """A declared total: a whole number (``"3"``, or ``"3.0"``), None where the attribute is
    absent, and the text itself where it is no count (``"1.5"``, ``"one"``, ``"-1"``)."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and number >= 0 else value


def _case_location(case: ET.Element, ctx: _Context) -> Location | None:
    file = case.get("file")
    line = _int(case.get("line"))
    if not file:
        return None
    if line is not None and ctx.pytest:
        line += 1  # pytest writes 0-based line numbers; every other producer 1-based
    return Location(relative(file, ctx.root), line or None)


def _bounded(chunks: Iterable[str], limit: int = TEXT_LIMIT) -> str:
    """The first ``limit`` characters of ``chunks`` joined, reading no more of them."""
    kept: list[str] = []
    size = 0
    for chunk in chunks:
        kept.append(chunk[: limit - size])
        size += len(kept[-1])
        if size >= limit:
            break
    return "".join(kept)


def _failure(child: ET.Element, case: ET.Element, ctx: _Context, suite: _Suite) -> Failure:
    message = (child.get("message") or "")[:TEXT_LIMIT]
    text = _bounded(child.itertext())  # Surefire nests <stackTrace> inside
    file = child.get("file")
    location: Location | None
    if file:
        location = Location(relative(file, ctx.root), _int(child.get("line")))
    elif ctx.pytest:
        location = innermost_frame(text, ctx.root)
    else:
        own = [f for f in (case.get("file"), suite.file) if f]
        location = first_frame(f"{message}\n{text}", ctx.root, case.get("classname"), own)
    location = location or _case_location(case, ctx)
    kind = "error" if child.tag.lower().endswith("error") else "failure"
    return Failure(kind, message or text.strip().partition("\n")[0][:500], text, location)


NAME_LIMIT = 2000  # characters of a name kept; a longer one keeps a hash of the rest


def _named(text: str) -> str:
    """``text``, or its first characters and a digest of the whole: distinct long names stay
    distinct, and no name costs more than its bound downstream."""
    if len(text) <= NAME_LIMIT:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{text[: NAME_LIMIT - 20]}...#{digest}"


def _nodeid(case: ET.Element, ctx: _Context) -> tuple[str, str]:
    """(nodeid, file): pytest's ``path.py::Class::name`` when that file is in the checkout,
    else the names as the producer wrote them; a case without a name is numbered."""
    classname = _named(case.get("classname") or "")
    name = _named(case.get("name") or f"(unnamed testcase {ctx.cases})")
    return _nodeid_of(classname, name, _named(case.get("file") or ""), ctx)


def _nodeid_of(classname: str, name: str, file: str, ctx: _Context) -> tuple[str, str]:
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


def _status(case: ET.Element) -> tuple[str, str]:
    """(outcome, word): the worst outcome the ``status`` and ``result`` attributes claim
    (GoogleTest's ``notrun``, an export's ``failed``) and the word that said it; ("", "")."""
    said = [(case.get(a) or "").strip().lower() for a in ("status", "result")]
    word = max(said, key=lambda w: _WORD_RANK.get(w, _UNKNOWN_WORD))
    return _STATUS.get(word, ""), word if word in _STATUS else ""


def _outcome(
    case: ET.Element, ctx: _Context, suite: _Suite
) -> tuple[str, str, tuple[Failure, ...], int]:
    """(outcome, message, failures, attempts) of one ``<testcase>`` element: worst wins."""
    if not len(case) and case.get("status") is None and case.get("result") is None:
        return "passed", "", (), 1  # the common case: nothing inside, nothing claimed
    final = [c for c in case if c.tag in _FINAL]
    reruns = [c for c in case if c.tag in _RERUN]
    flaky = [c for c in case if c.tag in _FLAKY]
    # A re-run failure with no final failure is a shape no producer documents: it failed.
    failing = final or reruns
    attempts = 1 + len(reruns) + len(flaky)
    status, said = _status(case)
    if failing or status in ("failed", "error"):
        failures = tuple(_failure(c, case, ctx, suite) for c in final + reruns + flaky)
        errors = any(f.kind == "error" for f in failures[: len(failing)]) or status == "error"
        message = failures[0].message if failures else f"status {said}"
        return ("error" if errors else "failed"), message, failures, attempts
    if flaky:
        failures = tuple(_failure(c, case, ctx, suite) for c in flaky)
        return "flaky", failures[0].message, failures, attempts
    skipped = case.find("skipped")
    if status == "skipped" or skipped is not None:
        reason = ""
        if skipped is not None:
            reason = (skipped.get("message") or (skipped.text or "").strip())[:TEXT_LIMIT]
        return "skipped", reason or (f"status {said}" if status else ""), (), 1
    return "passed", "", (), 1


# A number with its thousands grouped ("1,234.5"), as Maven Surefire writes times over 1,000 s
_GROUPED = re.compile(r"[1-9]\d{0,2}(?:,\d{3})+(?:\.\d*)?")


def _number(text: str) -> float | None:
    """A ``time`` attribute's number (grouped thousands read as one), None for no number."""
    text = text.strip()
    try:
        return float(text.replace(",", "") if _GROUPED.fullmatch(text) else text)
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _seconds(text: str) -> float:
    """A ``time`` attribute as seconds (0 for anything but a positive finite number); one float
    for each text, so the many cases that took "0.001" s hold one object between them."""
    duration = _number(text) or 0.0
    return duration if math.isfinite(duration) and duration > 0 else 0.0


def _claimed(text: str | None) -> float:
    """A ``time`` attribute as the duration it claims: infinite for a number that is not
    finite ("inf", "1e400", "NaN"), which no run took; 0 for no number."""
    duration = _number(text or "0") or 0.0
    return duration if math.isfinite(duration) else math.inf


def _case(case: ET.Element, ctx: _Context, suite: _Suite) -> TestCase:
    time_text = case.get("time") or "0"
    duration = _seconds(time_text)
    if not duration and not math.isfinite(_claimed(time_text)):
        ctx.dated = ctx.dated.seen(None, math.inf)
    nodeid, file = _nodeid(case, ctx)
    outcome, message, failures, attempts = _outcome(case, ctx, suite)
    named = (case.get("classname") or "", case.get("name") or "")
    if named in ctx.raised:
        ctx.seen_raised.add(named)
        ctx.raised_ids.add(nodeid)  # held against its outcome once its attempts are merged
    elif named in ctx.recovered and outcome == "passed":
        outcome, message = "flaky", "it raised, then passed when run again"
    first = failures[0] if failures else None
    location = first.location if first else _case_location(case, ctx)
    name = _named(case.get("name") or "")
    return TestCase(
        nodeid=nodeid,
        file=file,
        own_name=None if nodeid.rpartition("::")[2] == name else name,
        outcome=outcome,
        duration_s=duration,
        message=message,
        text=first.text if first else "",
        location=location,
        failures=failures,
        attempts=attempts,
        suite=suite.name,
    )


def merge_attempts(attempts: list[TestCase]) -> TestCase:
    """One test recorded several times in one suite (re-runs, ``go test -count``, a Gradle
    retry) is one case, and its worst attempt decides: failed if any attempt failed, even when
    a later one passed. The file does not say that a repeated case was a re-run (parametrized
    tests can share a name), so only the producers' documented re-run elements make a test
    flaky; every attempt's failures are kept."""
    if len(attempts) == 1:
        return attempts[0]
    worst = max(RANK[a.outcome] for a in attempts)
    chosen = [a for a in attempts if RANK[a.outcome] == worst][-1]
    return replace(
        chosen,
        failures=tuple(f for a in attempts for f in a.failures),
        attempts=sum(a.attempts for a in attempts),
        duration_s=sum(a.duration_s for a in attempts),
    )


Place = tuple[object, ...]  # a suite element and a file: where attempts of one test lie
Grouped = dict[Place, dict[str, "TestCase | list[TestCase]"]]


def _place(elem: ET.Element, case: TestCase, suite: _Suite, ctx: _Context) -> Place:
    """What, with the node id, makes two ``<testcase>`` elements attempts of one test: the same
    suite element and file. A case without a name or classname is a test of its own."""
    if not elem.get("classname") or not elem.get("name"):
        return ("unnamed", ctx.cases)
    return (suite.ordinal, case.file)


def _add(grouped: Grouped, place: Place, case: TestCase) -> None:
    """``case`` under its place and node id: a test read once is kept as itself, a repeated
    one as the list of its attempts (most tests are read once: no list, no key of their own)."""
    tests = grouped.setdefault(place, {})
    found = tests.get(case.nodeid)
    if found is None:
        tests[case.nodeid] = case
    elif isinstance(found, list):
        found.append(case)
    else:
        tests[case.nodeid] = [found, case]


def _distinct(cases: tuple[TestCase, ...], places: int) -> tuple[TestCase, ...]:
    """Distinct tests that share a node id (same names in two suites) are told apart; within
    one place (a suite element and file) node ids are distinct already."""
    shared: set[str] = set()
    if places > 1:
        ids: set[str] = set()
        shared = {c.nodeid for c in cases if c.nodeid in ids or ids.add(c.nodeid)}  # type: ignore[func-returns-value]
        del ids
    if not shared:
        return cases
    seen: Counter[str] = Counter()
    out = list(cases)
    for i, case in enumerate(out):
        if case.nodeid in shared:
            seen[case.nodeid] += 1
            where = f" in {case.suite}" if case.suite else ""
            out[i] = replace(case, nodeid=f"{case.nodeid} (#{seen[case.nodeid]}{where})")
    return tuple(out)


READ_CHUNK = 4 * 2**20


class _LargeReads:
    """A file whose reads return :data:`READ_CHUNK` bytes, whatever size is asked for. The
    parser is fed what it reads; expat parses a token that spans feeds again from its start at
    each feed, so a 50 MB failure message in 16 KiB feeds (iterparse's own) costs minutes, in
    4 MiB feeds under a second."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file

    def read(self, size: int = -1) -> bytes:
        return self.file.read(READ_CHUNK)


class _CappedText(ET.TreeBuilder):
    """A tree builder that keeps the first :data:`TEXT_LIMIT` characters of each run of text
    between two tags (a failure's trace, a test's captured output) and drops the rest as it
    arrives: a 50 MB trace costs no 50 MB string, nor the list of its pieces."""

    def __init__(self) -> None:
        super().__init__()
        self._kept = 0

    def data(self, data: str) -> None:
        if self._kept < TEXT_LIMIT:
            part = data[: TEXT_LIMIT - self._kept]
            self._kept += len(part)
            super().data(part)

    def start(self, tag: str, attrs: dict[str, str]) -> ET.Element:
        self._kept = 0
        return super().start(tag, attrs)

    def end(self, tag: str) -> ET.Element:
        self._kept = 0
        return super().end(tag)


def _events(path: Path) -> Iterator[tuple[str, ET.Element]]:
    parser = SafeET.DefusedXMLParser(target=_CappedText(), forbid_dtd=True)
    with path.open("rb") as file:
        source = _LargeReads(file)
        yield from SafeET.iterparse(source, events=("start", "end"), parser=parser)


_SUITES = ("testsuites", "testsuite")
MAX_DEPTH = 64  # elements open at once; nested suites of any producer stay far below
MAX_JUNIT_BYTES = 1024 * 2**20  # read at about 4 s a 50 MB on two cores


def _open(elem: ET.Element, open_: list[ET.Element], suites: list[_Suite], ctx: _Context) -> None:
    if len(open_) >= MAX_DEPTH:
        raise InputError(f"JUnit file {ctx.path} nests elements deeper than {MAX_DEPTH} levels")
    if not open_ and elem.tag not in _SUITES:
        raise InputError(
            f"JUnit file {ctx.path} has root <{elem.tag}>, not <testsuites> or "
            "<testsuite>: it is not JUnit XML"
        )
    if elem.tag in _SUITES and elem.get("name") in ("pytest tests", "pytest"):
        ctx.pytest = True
    if elem.tag in _SUITES:
        ctx.suites += elem.tag == "testsuite"
        name, file = elem.get("name") or "", elem.get("file") or ""
        declared = {a: _count(elem.get(a)) for a in _DECLARED}
        suites.append(_Suite(elem.tag, name, ctx.suites, file, declared))
        ctx.dated = ctx.dated.seen(elem.get("timestamp"), _claimed(elem.get("time")))
    open_.append(elem)


def _close_suite(suite: _Suite, ctx: _Context) -> None:
    """A count the suite (or the file's ``<testsuites>``) declares that is larger than what it
    holds: the file lost tests, failures or errors. pytest's tests= also counts each subtest's
    report, which adds no test case: those its plugin counted are allowed for."""
    level = "the file's <testsuites>" if suite.tag == "testsuites" else "suite"
    name = f" {suite.name or '(unnamed)'}" if suite.tag == "testsuite" else ""
    for attribute, element in _DECLARED.items():
        declared, held = suite.declared.get(attribute), suite.held[element]
        allowed = held + (ctx.subtest_reports if element == "testcase" else 0)
        if isinstance(declared, str):
            ctx.mismatches.append(
                f"{level}{name} declares {attribute}={declared[:40]!r}, which is no count; "
                f"the file holds {held}"
            )
        elif declared is not None and allowed < declared:
            ctx.mismatches.append(
                f"{level}{name} declares {declared} {attribute}; the file holds {held}"
                + (f" (and {ctx.subtest_reports} subtest reports)" if allowed != held else "")
            )


def _suite_failure(elem: ET.Element, suite: _Suite, ctx: _Context) -> TestCase:
    """A ``<failure>`` or ``<error>`` of the suite itself, outside any test (a test class that
    could not start: none of its tests ran), or of the file's ``<testsuites>``, outside any
    suite: a failed test of that suite, or of the file."""
    failure = _failure(elem, elem, ctx, suite)
    owner = suite.name or ("(unnamed suite)" if suite.ordinal else "(outside any suite)")
    name = f"{owner} ({elem.tag} outside any test case)"
    return TestCase(
        nodeid=name,
        file=suite.file,
        outcome="error" if failure.kind == "error" else "failed",
        duration_s=0.0,
        message=failure.message,
        text=failure.text,
        location=failure.location,
        failures=(failure,),
        attempts=1,
        suite=suite.name,
    )


_COUNTED = frozenset(_DECLARED.values())


def _held(elem: ET.Element, suites: list[_Suite]) -> None:
    """What one test case (or a suite-level failure) adds to every suite it lies in: a case
    that a status marks not run (GoogleTest's ``notrun``) is held as skipped, as its element."""
    tags = [elem.tag]
    if elem.tag == "testcase":
        tags = [c.tag for c in elem if c.tag in _COUNTED]
        if "skipped" not in tags and _status(elem)[0] == "skipped":
            tags.append("skipped")
    for open_suite in suites:
        held = open_suite.held
        held["testcase"] += 1
        for tag in tags:
            held[tag] += 1


def _drop(parent: ET.Element, elem: ET.Element) -> None:
    """Remove ``elem``, just read, from ``parent``: it is the last child there."""
    if len(parent) and parent[-1] is elem:
        del parent[-1]
    else:
        parent.remove(elem)


def _stream(ctx: _Context) -> Grouped:
    """Every test case of the file, grouped into attempts of one test, in file order."""
    grouped: Grouped = {}
    open_: list[ET.Element] = []
    suites: list[_Suite] = []
    top = _Suite("", "", 0)  # cases outside any <testsuite>
    for event, elem in _events(ctx.path):
        if event == "start":
            _open(elem, open_, suites, ctx)
            continue
        open_.pop()
        parent = open_[-1] if open_ else None
        testsuite = next((s for s in reversed(suites) if s.tag == "testsuite"), top)
        if elem.tag == "testcase":
            ctx.cases += 1
            case = _case(elem, ctx, testsuite)
            _add(grouped, _place(elem, case, testsuite, ctx), case)
            _held(elem, suites)
        elif elem.tag in _FINAL and parent is not None and parent.tag in _SUITES:
            ctx.cases += 1
            failed = _suite_failure(elem, testsuite, ctx)
            grouped[("suite", ctx.cases)] = {failed.nodeid: failed}
            _held(elem, suites)
        elif elem.tag in _SUITES:
            _close_suite(suites.pop(), ctx)
        if parent is not None and (elem.tag in ("testcase", *_SUITES) or parent.tag in _SUITES):
            _drop(parent, elem)  # keep memory flat: this element has been read
    return grouped


def _check_size(path: Path) -> None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise MissingFileError(
            f"JUnit file {path} does not exist: did the test command run?"
        ) from None
    except OSError as exc:
        raise InputError(f"JUnit file {path} cannot be read: {exc}") from None
    if size == 0:
        raise InputError(f"JUnit file {path} is empty: the test run was cut off before the end")
    if size > MAX_JUNIT_BYTES:
        raise InputError(
            f"JUnit file {path} is {size / 2**20:,.0f} MiB, over the "
            f"{MAX_JUNIT_BYTES / 2**20:,.0f} MiB a reader takes: split the run's JUnit "
            "into several files"
        )


def read_junit(
    path: Path, root: Path | None = None, counts: PytestCounts | None = None
) -> TestSuite:
    """Read a JUnit XML file written by any producer; an unusable file is an InputError that
    names the file and what is wrong with it (parse errors with line and column).
    ``counts``: what stagegate's pytest plugin saw beside a pytest file
    (:func:`read_pytest_counts`); None where its record expects none."""
    ctx = _Context(path=path, root=(root or Path.cwd()).resolve())
    if counts is not None:
        ctx.subtest_reports, ctx.raised = counts.subtest_reports, counts.raised or frozenset()
        ctx.recovered = counts.recovered
    _check_size(path)
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
    places = len(grouped)
    cases = tuple(
        merge_attempts(a) if isinstance(a, list) else a
        for tests in grouped.values()
        for a in tests.values()
    )
    del grouped
    return TestSuite(
        cases=_distinct(cases, places),
        source=str(path),
        count_mismatches=tuple(ctx.mismatches),
        dated=ctx.dated,
        witnessed=None if counts is None or not ctx.pytest else counts.complete,
        contradicted=_contradicted(cases, ctx),
        foreign_hooks=counts.foreign if counts is not None else (),
        unreported=tuple(f"{c}::{n}" if c else n for c, n in sorted(ctx.raised - ctx.seen_raised)),
        deselected=_deselected(counts, ctx),
        deselected_marks=_deselected_marks(counts, ctx),
        empty_files=counts.empty if counts is not None else (),
        skipped_by_code=_skipped_by_code(cases, counts, ctx),
    )


def _contradicted(cases: tuple[TestCase, ...], ctx: _Context) -> tuple[str, ...]:
    """The tests the plugin saw raise that the file, every attempt of each merged, says passed
    or skipped; each once."""
    passed = ("passed", "skipped")
    return tuple(
        dict.fromkeys(c.nodeid for c in cases if c.nodeid in ctx.raised_ids and c.outcome in passed)
    )


def _skipped_by_code(
    cases: tuple[TestCase, ...], counts: PytestCounts | None, ctx: _Context
) -> tuple[tuple[str, Location], ...]:
    """(node id, where) of each test the file says skipped that the code under test skipped."""
    skipped = {c.nodeid for c in cases if c.outcome == "skipped"}
    named = counts.skipped_by if counts is not None and counts.skipped_by else {}
    found = ((_nodeid_of(_named(c), _named(n), "", ctx)[0], w) for (c, n), w in named.items())
    return tuple(sorted((i, Location.parse(w)) for i, w in found if i in skipped))


def _deselected(counts: PytestCounts | None, ctx: _Context) -> tuple[str, ...]:
    """The node ids of the tests the plugin saw collected and dropped from the run."""
    names = counts.deselected if counts is not None and counts.deselected else ()
    ids = (_nodeid_of(_named(c), _named(n), "", ctx)[0] for c, n in names)
    return tuple(sorted(set(ids)))


def _deselected_marks(
    counts: PytestCounts | None, ctx: _Context
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each announced dropped test's marks, by node id."""
    marks = counts.deselected_marks if counts is not None else {}
    return tuple(
        sorted((_nodeid_of(_named(c), _named(n), "", ctx)[0], m) for (c, n), m in marks.items())
    )


MAX_COUNTS_BYTES = 64 * 2**20  # a name per test that raised: a million of them fit


@dataclass(frozen=True)
class PytestCounts:
    """What stagegate's pytest plugin saw beside a pytest JUnit file: the subtest reports it
    counted, and the tests that raised (classname, name), or None where it did not say (no
    file, or one written before the plugin looked)."""

    subtest_reports: int = 0
    raised: frozenset[tuple[str, str]] | None = None
    recovered: frozenset[tuple[str, str]] = frozenset()  # raised, then passed when run again
    foreign: tuple[str, ...] = ()  # what could run or report tests unseen (hooks, patches)
    # collected and dropped from the run (None: a file that does not say), and test files
    # that yielded no test
    deselected: frozenset[tuple[str, str]] | None = None
    empty: tuple[str, ...] = ()
    # skipped or expected to fail by the code under test, with where (None: does not say)
    skipped_by: dict[tuple[str, str], str] | None = None
    # the marks of the dropped tests pytest announced as deselected
    deselected_marks: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether the plugin said which tests raised, which it dropped and what skipped."""
        return None not in (self.raised, self.deselected, self.skipped_by)


def _names(data: dict[str, object], key: str, path: Path) -> frozenset[tuple[str, str]] | None:
    names = data.get(key)
    if names is None and data.get("format_version") == 1:
        return None
    pairs = names if isinstance(names, list) else [None]
    if not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs
    ):
        raise InputError(
            f"pytest counts file {path} holds no list {key} of tests ([classname, name] "
            "pairs): run the tests again with stagegate's pytest plugin"
        )
    return frozenset((c, n) for c, n in pairs)  # type: ignore[misc]


def read_pytest_counts(path: Path) -> PytestCounts:
    """What stagegate's pytest plugin saw (its ``.counts.json``); nothing where there is no
    such file. One that is there and unusable is an InputError."""
    if not path.exists():
        return PytestCounts()
    data = load_json(path, "pytest counts file", MAX_COUNTS_BYTES)
    count = data.get("subtest_reports") if isinstance(data, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InputError(f"pytest counts file {path} holds no count of subtest_reports")
    recovered = _names(data, "recovered", path) if "recovered" in data else None
    raised = _names(data, "raised", path)
    deselected = _names(data, "deselected", path) if "deselected" in data else None
    empty = _texts(data, "empty", path)
    return PytestCounts(
        count, raised, recovered or frozenset(), _texts(data, "foreign", path), deselected, empty,
        _skipped_by(data, path), _marks(data, path),
    )  # fmt: skip


def _skipped_by(data: dict[str, object], path: Path) -> dict[tuple[str, str], str] | None:
    """The tests the code under test skipped: [classname, name, where] each."""
    if "skipped_by" not in data:
        return None
    triples = _triples(data, "skipped_by", path, "where")
    return {(c, n): _named(where[:500]) for c, n, where in triples}


def _triples(data: dict[str, object], key: str, path: Path, what: str) -> list[list[str]]:
    triples = data.get(key, [])
    if not isinstance(triples, list) or not all(
        isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t) for t in triples
    ):
        raise InputError(
            f"pytest counts file {path} holds no list {key} of tests ([classname, name, {what}] "
            "triples): run the tests again with stagegate's pytest plugin"
        )
    return triples


def _marks(data: dict[str, object], path: Path) -> dict[tuple[str, str], tuple[str, ...]]:
    """The marks of the tests pytest deselected: [classname, name, mark] each."""
    marks: dict[tuple[str, str], tuple[str, ...]] = {}
    for c, n, mark in _triples(data, "deselected_marks", path, "mark"):
        marks[c, n] = (*marks.get((c, n), ()), _named(mark[:200]))
    return marks


def _texts(data: dict[str, object], key: str, path: Path) -> tuple[str, ...]:
    texts = data.get(key, [])
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise InputError(f"pytest counts file {path} holds no list of texts under {key!r}")
    return tuple(_named(t[:500]) for t in texts)
