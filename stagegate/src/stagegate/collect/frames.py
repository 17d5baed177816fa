"""Where a failure happened, read from its traceback or stack trace.

pytest prints the innermost frame last; JVM, .NET and JavaScript stacks print it first, below
the assertion library's own frames; GoogleTest, Catch2 and go print the failing line alone.
Each reader picks the frame in the test's own code: for a JVM stack the frame of the test's
class, for a JavaScript stack the frame in the test's file, never ``node:internal`` or a
dependency. Windows paths keep their drive letter.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path, PureWindowsPath

from stagegate.model import Location

DEPENDENCY_DIRS = {"site-packages", "dist-packages", "node_modules", ".nox", ".venv", ".tox"}
_DRIVE = r"(?:[A-Za-z]:[\\/])?"
_WINDOWS_DRIVE = re.compile(r"[A-Za-z]:[\\/]")
# A line number: at most 9 digits, not the start of a longer run (a number of thousands of
# digits is no line, and int() refuses more than 4300 of them).
_LINE = r"(?P<line>\d{1,9})(?!\d)"
# pytest's traceback lines: "src/pkg/mod.py:80: KeyError" or "C:\src\mod.py:80: in func".
_PYTEST_FRAME = re.compile(rf"^(?P<file>{_DRIVE}[^\s:][^:\n]*\.py):{_LINE}: ", re.MULTILINE)
# Python's own frames: a SyntaxError's place ('File "src/pkg/mod.py", line 2'), --tb=native.
_PYTHON_FRAME = re.compile(rf'File "(?P<file>[^"\n]+\.py)", line {_LINE}')
# Any other producer: "file.ext:LINE" (GoogleTest, Catch2's "at f.cpp:5", JavaScript stacks).
# A path is taken whole, from where it starts, never given back (possessive): a long run of
# path characters is scanned once, not once from each of its characters (that was quadratic).
_PATH = r"[\w./\\@+~-]"
_ANY_FRAME = re.compile(rf"(?<!{_PATH})(?P<file>{_DRIVE}{_PATH}++):{_LINE}")
_EXTENSION = re.compile(r"\.[A-Za-z]\w{0,5}\Z")
# JVM stack lines: "at com.example.CalcTest.adds(CalcTest.java:31)" (Kotlin, Scala alike).
_JVM_FRAME = re.compile(rf"\bat\s+(?P<cls>[\w$.]+)\.[\w$<>-]+\((?P<file>[^():\s]+\.\w+):{_LINE}\)")
_FILE_URL = re.compile(r"file://(?:/(?=[A-Za-z]:))?")
# Frames of the JVM, its test frameworks and assertion libraries: never the place to look.
_JVM_LIBRARIES = (
    "java.", "javax.", "jdk.", "sun.", "kotlin.", "scala.", "org.junit.", "junit.",
    "org.opentest4j.", "org.assertj.", "org.hamcrest.", "org.testng.", "org.mockito.",
    "org.scalatest.", "org.apache.maven.surefire.", "org.gradle.", "com.google.common.truth.",
)  # fmt: skip


def parts(file: str) -> tuple[str, ...]:
    """The path's parts, whether it was written with / or with \\ (``C:/a`` is ``C:\\a``)."""
    windows = "\\" in file or _WINDOWS_DRIVE.match(file)
    return PureWindowsPath(file).parts if windows else Path(file).parts


def in_dependency(file: str) -> bool:
    """The file lies in an installed dependency (site-packages, node_modules, a venv)."""
    return bool(DEPENDENCY_DIRS.intersection(parts(file)))


def relative(file: str, root: Path) -> str:
    """``file`` relative to the checkout when it lies inside it, else as written."""
    if os.path.isabs(file):
        try:
            return str(Path(file).resolve().relative_to(root))
        except (ValueError, OSError):
            return file
    return file


def _climbs_out(file: str) -> bool:
    """The relative path, normalised, leaves the folder it is read from (``a/../../x.py``)."""
    depth = 0
    for part in parts(file):
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            return True
    return False


def _in_repo(file: str, root: Path) -> bool:
    """The frame's file lies in the checkout: relative to it, never climbing out, and not in a
    dependency."""
    where = relative(file, root)
    return not os.path.isabs(where) and not _climbs_out(where) and not in_dependency(file)


def innermost_frame(text: str, root: Path | None = None) -> Location | None:
    """The innermost frame of a pytest traceback that lies in the checkout (not in a
    dependency); the innermost frame of all when none does."""
    root = root or Path.cwd()
    found = [*_PYTEST_FRAME.finditer(text), *_PYTHON_FRAME.finditer(text)]
    found.sort(key=re.Match.start)
    frames = [Location(relative(m["file"], root), int(m["line"])) for m in found]
    ours = [f for f in frames if _in_repo(f.file, root)]
    return (ours or frames or [None])[-1]


def last_frame(text: str) -> Location | None:
    """The innermost ``file.py:line`` of a pytest traceback, wherever it is."""
    frames = list(_PYTEST_FRAME.finditer(text))
    return Location(frames[-1]["file"], int(frames[-1]["line"])) if frames else None


def _jvm_frame(text: str, classname: str | None) -> Location | None:
    """The first frame of the test's own class (or its inner classes and lambdas); else the
    first frame outside the JVM's and the test frameworks' packages."""
    frames = list(_JVM_FRAME.finditer(text))
    if not frames:
        return None
    own = [m for m in frames if classname and (m["cls"] + "$").startswith(classname + "$")]
    ours = [m for m in frames if not m["cls"].startswith(_JVM_LIBRARIES)]
    chosen = (own or ours or frames)[0]
    return Location(chosen["file"], int(chosen["line"]))


def _same_file(frame: str, own: Iterable[str]) -> bool:
    """The frame's file is one of ``own``: the shorter path is the end of the longer, part for
    part (``test/a.spec.js`` is ``/ci/test/a.spec.js``; ``src/a.spec.js`` is not)."""
    mine = parts(frame)
    for file in own:
        theirs = parts(file)
        shorter = min(len(mine), len(theirs))
        if shorter and mine[-shorter:] == theirs[-shorter:]:
            return True
    return False


def first_frame(
    text: str, root: Path, classname: str | None, own_files: Iterable[str]
) -> Location | None:
    """The place a non-pytest failure points to: the test class's frame of a JVM stack, else
    the first ``file:line`` in the test's own file, else the first outside the dependencies
    and the runtime (``node:internal``)."""
    text = _FILE_URL.sub("", text)
    found = _jvm_frame(text, classname)
    if found is not None:
        return found  # a JVM frame names its file alone, never a path
    frames = [
        (m["file"], int(m["line"]))
        for m in _ANY_FRAME.finditer(text)
        if _EXTENSION.search(m["file"])
        and not text.endswith("node:", 0, m.start())
        and not in_dependency(m["file"])
    ]
    own = [f for f in frames if _same_file(f[0], own_files)]
    chosen = (own or frames or [None])[0]
    return Location(relative(chosen[0], root), chosen[1]) if chosen else None
