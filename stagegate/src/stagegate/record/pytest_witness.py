"""The witness of a pytest run's outcomes, apart from pytest's reports (stagegate's pytest
plugin registers it wherever pytest writes JUnit).

In every process that runs tests it notes each test whose setup, call or teardown raised what
pytest reports as a failure or an error: its hook wrappers sit outside pytest's own
(``tryfirst``) and around the test function itself (``pytest_pyfunc_call``), so they see the
exception before any report is made of it. A test run again (pytest-rerunfailures) is judged by
its last run; one that raised before it and not in it recovered.

It also notes what could run or report tests without raising through it: a plugin registered
once tests are collected (by a test module, or code it imports; conftest files aside) whose
hooks are the project's own code, and what :mod:`stagegate.record.pytest_integrity` holds
still (pytest's functions, the run's hook functions, each test's code) changed.

And what was collected and did not run (:mod:`stagegate.record.pytest_collected`); stagegate
looks for these in the other stages' results. And each test that the code it tests skipped or
marked an expected failure (``pytest.skip`` or ``pytest.xfail`` called outside the tests and
conftest files), with where it was called.
"""

from __future__ import annotations

import _imp
import ast
import configparser
import doctest
import gc
import importlib.metadata
import os
import re
import sys
import sysconfig
import time
import tomllib
from collections.abc import Callable, Iterator
from functools import cached_property, lru_cache
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, NamedTuple
from unittest import SkipTest

import pytest
from _pytest.assertion.rewrite import rewrite_asserts
from _pytest.doctest import DoctestItem, DoctestModule, DoctestTextfile
from _pytest.junitxml import bin_xml_escape, mangle_test_address
from _pytest.outcomes import Exit, Skipped, XFailed
from _pytest.skipping import evaluate_xfail_marks

# Only pytest's and its own folder's imports: the gate mounts this folder apart from the rest of
# stagegate (stagegate.record.witness_file)
from .pytest_collected import Collected
from .pytest_integrity import RUN_HOOKS, RunIntegrity, tampered_before

DOCTESTS = (DoctestModule, DoctestTextfile)
RAISED_KEY = "stagegate_raised"  # a pytest-xdist worker's witness, in its workeroutput
# The report classes of pytest's own subtests (9.0 on) and of the pytest-subtests plugin
SUBTEST_REPORTS = ("SubtestReport", "SubTestReport")
Raised = tuple[str, str]  # a test's classname and name, as pytest's JUnit writer gives them

_DEPENDENCY_DIRS = {"site-packages", "dist-packages", ".nox", ".venv", ".tox", "venv"}


def junit_written(xmlpath: str) -> Path:
    """Where pytest writes ``--junitxml=xmlpath``: variables and ``~`` expanded, absolute from
    the working directory, ``..`` taken away by the name (as pytest's own junitxml does)."""
    return Path(os.path.normpath(os.path.abspath(os.path.expanduser(os.path.expandvars(xmlpath)))))


def in_project(filename: str, root: Path) -> str | None:
    """``filename`` relative to ``root`` when it is the project's own code, else None."""
    try:
        relative = Path(filename).resolve().relative_to(root)
    except (ValueError, OSError):
        return None
    return None if _DEPENDENCY_DIRS.intersection(relative.parts) else str(relative)


_LIBRARIES = tuple(
    Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "purelib", "platlib")
)


def own_code(filename: str, root: Path) -> str | None:
    """``filename`` where it is no library's (the standard library, an installed package):
    relative to ``root`` inside it, else absolute; None for a library's."""
    where = in_project(filename, root)
    if where is not None:
        return where
    path = Path(filename).resolve()
    if _DEPENDENCY_DIRS.intersection(path.parts) or any(map(path.is_relative_to, _LIBRARIES)):
        return None
    return str(path)


def _configs(root: Path) -> tuple[dict[str, Any], configparser.ConfigParser]:
    """The root's pyproject.toml and setup.cfg, each empty where there is none to read."""
    try:
        data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    setup = configparser.ConfigParser(interpolation=None)
    try:
        setup.read(root / "setup.cfg", encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        setup = configparser.ConfigParser(interpolation=None)
    return data, setup


def _table(data: Any, *keys: str) -> dict[str, Any]:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def project_name(root: Path) -> str | None:
    """The name of the root's distribution: pyproject.toml's ``[project]`` (or Poetry's
    ``[tool.poetry]``) name, else setup.cfg's ``[metadata]`` name."""
    data, setup = _configs(root)
    for table in (_table(data, "project"), _table(data, "tool", "poetry")):
        if isinstance(table.get("name"), str):
            return str(table["name"])
    return setup.get("metadata", "name", fallback=None) or None


def declared_packages(root: Path) -> frozenset[str]:
    """The top packages and modules the root's build configuration names, in lower case:
    setuptools' packages and py-modules (pyproject.toml or setup.cfg), Hatch's wheel
    packages, Flit's module, Poetry's packages."""
    data, setup = _configs(root)
    tool = _table(data, "tool")
    names = [
        *_listed(_table(tool, "setuptools").get("packages")),
        *_listed(_table(tool, "setuptools").get("py-modules")),
        *_listed(_table(tool, "hatch", "build", "targets", "wheel").get("packages")),
        *_listed(_table(tool, "flit", "module").get("name")),
        *(_table(p).get("include") for p in _listed(_table(tool, "poetry").get("packages"))),
        *setup.get("options", "packages", fallback="").split(),
        *setup.get("options", "py_modules", fallback="").split(),
    ]
    tops = (n.replace("\\", "/").rstrip("/").split("/")[-1].split(".")[0] for n in names if n)
    return frozenset(t.lower() for t in tops if t.isidentifier())


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value] if isinstance(value, str) else []


def installed_files(root: Path) -> dict[Path, str]:
    """The modules of the project's own distribution (:func:`project_name`) installed apart
    from its tree, as tox installs it: each resolved path, and the path it has inside its
    installation (``mylib/core.py``). Nothing for an editable install, which lists no module."""
    name = project_name(root)
    try:
        dist = importlib.metadata.distribution(name or "")
    except (ValueError, importlib.metadata.PackageNotFoundError):
        return {}
    # Each named by where it is, never by RECORD's words for it ("e2e/../mylib/x.py", a link
    # named tests/): the code under test can rewrite its own RECORD
    top = Path(str(dist.locate_file(""))).resolve()
    modules = (f for f in dist.files or () if f.suffix == ".py")
    found = (Path(str(dist.locate_file(f))).resolve() for f in modules)
    return {path: path.relative_to(top).as_posix() for path in found if path.is_relative_to(top)}


def own_packages(root: Path) -> frozenset[str]:
    """The project's own packages, by its distribution's name ("testinfra"), by those its
    build configuration names and by those its installation names (sklearn for
    scikit-learn): whatever their names start with, they are the code under test."""
    name = project_name(root)
    named = re.sub(r"[-_.]+", "_", name or "").lower()
    return top_level(name, root) | declared_packages(root) | {named}


def top_level(name: str | None, root: Path) -> frozenset[str]:
    """The packages the distribution ``name`` installs, by each of its installations'
    ``top_level.txt`` (setuptools writes one, editable installs included), in lower case; an
    installation's metadata kept in the tree (``root``) is the tree's claim, and not read."""
    found = set[str]()
    for dist in importlib.metadata.distributions(name=name) if name else ():
        where = Path(str(dist.locate_file(""))).resolve()
        if in_project(str(where), root) is not None:
            continue  # a dist-info folder committed beside the code, not an installation
        text = dist.read_text("top_level.txt") or ""
        found.update(n.strip().lower() for n in text.splitlines() if n.strip())
    return frozenset(found)


PACKAGES = pytest.StashKey[frozenset[str]]()
STARTED = pytest.StashKey[int]()  # file_clock_ns() before the first conftest.py was imported
STARTED_KEY = "stagegate_started"  # ... in the controller's run: in each worker's workerinput


def file_clock_ns() -> int:
    """Now, by the clock the kernel dates files with (Linux: the coarse real-time clock, a few
    milliseconds behind the precise one); elsewhere the precise clock, 10 ms back."""
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", None)
    if coarse is None:
        return time.time_ns() - 10_000_000
    return time.clock_gettime_ns(coarse)


def note_packages(config: pytest.Config) -> None:
    """Before the first conftest.py is imported (and the code under test with it): the
    project's own packages, which the witness holds the code to, and the time."""
    config.stash[STARTED] = file_clock_ns()
    config.stash[PACKAGES] = own_packages(Path(config.rootpath).resolve())


_SITES = ("site-packages", "dist-packages")


def installed_copy(path: Path, root: Path) -> str | None:
    """The path below an installation (``mylib/core.py``) of ``path``, a module installed in
    a site-packages folder, where it is a copy of the project's own file (at that path below
    the root or its ``src/``, byte for byte): the code under test wherever it was installed,
    whatever its distribution's RECORD says (the code can rewrite its own)."""
    sites = [i for i, part in enumerate(path.parts) if part in _SITES]
    if not sites:
        return None
    below = Path(*path.parts[sites[-1] + 1 :])
    for tree in (root, root / "src"):
        try:
            if (tree / below).is_file() and (tree / below).read_bytes() == path.read_bytes():
                return below.as_posix()
        except OSError:
            continue
    return None


# What a test skips or expects to fail by; the witness's own folder (a project's own code where
# stagegate is the project)
_SKIPS = (Skipped, XFailed, SkipTest)
_WITNESS = Path(__file__).resolve().parent


def _keys(code: CodeType) -> Iterator[tuple[str, int, bytes]]:
    """Each code object in ``code`` (:func:`_codes`), by name, first line and bytecode."""
    return (_key(c) for c in _codes(code))


@lru_cache(maxsize=128)
def _compiled(path: Path, stamp: tuple[int, int], config: pytest.Config) -> frozenset[Any]:
    """The code a file's source compiles to, as Python compiles it and as pytest does when it
    rewrites asserts (a test module, a conftest.py); none where it cannot be compiled."""
    try:
        source = path.read_bytes()
        tree = ast.parse(source, filename=str(path))
        plain = compile(tree, str(path), "exec", dont_inherit=True)
        rewrite_asserts(tree, source, str(path), config)
        rewritten = compile(tree, str(path), "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    return frozenset(_keys(plain)) | frozenset(_keys(rewritten))


def compiled_from(frame: Any, path: Path, config: pytest.Config) -> bool:
    """Whether ``frame`` runs code of ``path``'s source as it is on disk, and not code that
    only names the file (compiled under its name, run in its module's namespace)."""
    try:
        stat = path.stat()
    except OSError:
        return False
    return _key(frame.f_code) in _compiled(path, (stat.st_mtime_ns, stat.st_size), config)


_SKIPPED_DIRS = _DEPENDENCY_DIRS | {".git", "node_modules", "__pycache__"}


def tree_state(root: Path) -> dict[Path, tuple[int, int]]:
    """Each Python file below ``root`` (virtualenvs and dependencies apart), by its
    modification time and size: the tree as the run found it."""
    state = {}
    for folder, names, files in os.walk(root):
        names[:] = [n for n in names if n not in _SKIPPED_DIRS]
        for name in files:
            if name.endswith(".py"):
                path = Path(folder, name)
                try:
                    stat = path.stat()
                except OSError:
                    continue
                state[path.resolve()] = (stat.st_mtime_ns, stat.st_size)
    return state


def ran_from(
    frame: Any, path: Path, config: pytest.Config, root: Path, tree: dict[Path, tuple[int, int]]
) -> bool:
    """Whether ``frame`` runs code of ``path`` as the file was when the run began (its state
    in ``tree``; a file written since is code made at run time), code its source compiles
    to, in the namespace of a module loaded from it."""
    try:
        stat = path.stat()
    except OSError:
        return False
    written_since = tree.get(path) != (stat.st_mtime_ns, stat.st_size)
    if written_since and in_project(str(path), root) is not None:
        return False  # a file of the tree (not an installation's)
    return compiled_from(frame, path, config) and _loaded_from(frame.f_globals, path)


def _loaded_from(namespace: dict[str, Any], path: Path) -> bool:
    """Whether ``namespace`` is the namespace of a module loaded from ``path``: one in
    sys.modules, else one still alive (a conftest.py pytest took out of sys.modules, a
    module that skipped itself as it was imported), else, where no module loaded from that
    file is alive (a helper run from its file, or taken out of sys.modules and gone), one
    that names the file; never a second namespace beside a live module's."""
    modules = [m for m in list(sys.modules.values()) if _namespace(m) is not None]
    if not any(_namespace(m) is namespace for m in modules):  # rare: every object searched
        modules += [m for m in gc.get_referrers(namespace) if _namespace(m) is not None]
    live = [vars(m) for m in modules if _file_is(getattr(m, "__file__", None), path)]
    if live:
        return any(n is namespace for n in live)
    return _file_is(namespace.get("__file__"), path)


def _file_is(name: Any, path: Path) -> bool:
    return isinstance(name, str) and not name.startswith("<") and Path(name).resolve() == path


def _namespace(module: Any) -> Any:
    """A module's namespace (None for anything else)."""
    return vars(module) if isinstance(module, ModuleType) else None


def _examples(test: Any) -> Iterator[CodeType]:
    """A DocTest's examples as doctest compiles them: with the __future__ features of its
    namespace as it began (none, for a text file) or as it is now (an example imports one)."""
    now = doctest._extract_future_flags(test.globs)  # type: ignore[attr-defined]
    for number, example in enumerate(test.examples):
        for flags in {0, now}:
            try:
                yield compile(
                    example.source, f"<doctest {test.name}[{number}]>", "single", flags, True
                )
            except (SyntaxError, ValueError):
                continue


def _codes(code: CodeType) -> Iterator[CodeType]:
    """``code`` and each code object in it (its functions, theirs)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


def _key(code: CodeType) -> tuple[str, int, bytes]:
    return code.co_name, code.co_firstlineno, code.co_code


@lru_cache(maxsize=64)
def _frozen(name: str) -> frozenset[Any]:
    """The code of the frozen module ``name`` (importlib's, os in Python 3.11), by key."""
    try:
        return frozenset(_keys(_imp.get_frozen_object(name)))
    except (ImportError, TypeError, ValueError):
        return frozenset()


class Origin(NamedTuple):
    """Where a skip was raised: a frame's file and line; ``made``: by code made at run time,
    or code that names a file it was not compiled from (the file is only its claim)."""

    path: Path
    line: int
    made: bool = False


def _library_code(frame: Any, path: Path | None, config: pytest.Config) -> bool:
    """Whether a frame outside the project (pytest's, the standard library's, the witness's)
    runs its file's own code, or a frozen module's; code that names one and is not passes
    nothing on."""
    name = frame.f_code.co_filename
    if path is None:
        frozen = name.startswith("<frozen ") and name.endswith(">")
        return frozen and _key(frame.f_code) in _frozen(name[len("<frozen ") : -1])
    return compiled_from(frame, path, config)


def _projects(path: Path, root: Path, installed: dict[Path, str]) -> bool:
    """Whether ``path`` is a file of the project, or of its installation (the witness's own
    files aside, where stagegate is the project)."""
    if path.is_relative_to(_WITNESS):
        return False
    own = in_project(str(path), root) is not None or path in installed
    return own or installed_copy(path, root) is not None


def raised_from(
    exc: BaseException,
    root: Path,
    config: pytest.Config,
    installed: dict[Path, str],
    believed: Callable[[Any, Path | None], bool],
) -> Origin | None:
    """Where the project's own code raised ``exc``: the innermost frame of its traceback in a
    file of the project or of its ``installed`` distribution. pytest, the standard library,
    other installed packages and the witness pass it on, where their frames run their files'
    code; a doctest's own skip is the test's (``believed`` with no path: one pytest collected).
    Code of no file (``<string>``), code that is not its file's and a frame of the project's
    that is not ``believed`` are code made at run time: the code under test's. A skip pytest
    or unittest raised anew while handling one (a unittest.TestCase's SkipTest) is placed
    where the one handled was raised."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    for frame, line in reversed(frames):
        name = frame.f_code.co_filename
        if name.startswith("<doctest ") and believed(frame, None):
            return None
        path = None if name.startswith("<") else Path(name).resolve()
        if path is not None and _projects(path, root, installed):
            return Origin(path, line, made=not believed(frame, path))
        if not _library_code(frame, path, config):
            return Origin(Path(name), line, made=True)
    handled = exc.__context__
    if isinstance(handled, _SKIPS):
        return raised_from(handled, root, config, installed, believed)
    return None


def _holds(module: Path, path: Path) -> bool:
    """Whether ``path`` is the test ``module`` (or test package folder) being collected or
    the ``__init__.py`` of the package folder that holds it: the tests' own code."""
    module = module.resolve()
    folder = module if module.is_dir() else module.parent
    return path == module or path == folder / "__init__.py"


def _test_named(part: str) -> bool:
    """A folder or module name inside the project's package that only tests have (a module
    named *_test is the product's, t_test.py, unless pytest collected tests from it)."""
    return part in ("test", "tests") or part.startswith("test_")


# What pytest reports as no failure, bound as this module is imported: a test module that
# rebinds pytest.exit.Exception (or the like) later does not make a failure one of them
_NOT_FAILURES = (*_SKIPS, Exit, KeyboardInterrupt)


def _xfailed(item: pytest.Item, exc: BaseException) -> bool:
    """Whether the test's xfail marks, evaluated as pytest evaluates them (a condition that
    holds, ``raises`` that matches; marks added in the test itself included), make ``exc`` an
    expected failure. What pytest keeps of its own evaluation (the item's stash) is not read:
    code under test can write it."""
    if item.config.option.runxfail:
        return False
    xfailed = evaluate_xfail_marks(item)
    if not xfailed:
        return False
    raises = xfailed.raises
    if raises is None or isinstance(raises, type | tuple):
        return raises is None or isinstance(exc, raises)
    matches = getattr(raises, "matches", None)
    return bool(matches and matches(exc))


def _expected(item: pytest.Item, exc: BaseException) -> bool:
    """Whether pytest reports ``exc`` as no failure: a skip, an expected failure, the end of
    the session (which ends the run without a report)."""
    return isinstance(exc, _NOT_FAILURES) or _xfailed(item, exc)


class OutcomeWitness:
    """What one process saw; the controller adds its workers' (:meth:`add`)."""

    def __init__(self, config: pytest.Config, root: Path, key: str = RAISED_KEY) -> None:
        self.key = key  # where a pytest-xdist worker sends what it saw
        self.prefix = getattr(config.option, "junitprefix", None)
        self.config, self.root = config, root
        # read before the code under test is imported (note_packages), else now
        self.packages = config.stash.get(PACKAGES, None) or own_packages(root)
        self.tree: dict[Path, tuple[int, int]] = {}  # as the session starts
        self.raised: set[Raised] = set()  # in its last run
        self.recovered: set[Raised] = set()  # in an earlier run, not in its last
        self.foreign: set[str] = set()  # what could run or report tests unseen
        # what was collected, kept and started, since the run (its controller's, if any) began
        started = config.stash.get(STARTED, None) or file_clock_ns()
        controller = getattr(config, "workerinput", {}).get(STARTED_KEY, started)
        self.run = Collected(min(started, int(controller)))
        self.deselected: set[Raised] = set()  # collected, then dropped from the session
        self.marks: dict[Raised, tuple[str, ...]] = {}  # the marks of those pytest deselected
        self.skipped_by: dict[Raised, str] = {}  # skipped by the code under test: where
        self.test_files: set[Path] = set()  # the modules test functions were collected from
        self.doctests: dict[str, Any] = {}  # each doctest item's DocTest, by node id
        self._resolved: tuple[int, set[Path]] = (0, set())  # ... resolved, when a skip asks
        self.collecting = False
        self.integrity = RunIntegrity(config)
        self.foreign.update(tampered_before(config))
        # a test run again is a re-run only where a re-run plugin runs tests again
        self.reruns = config.pluginmanager.has_plugin("rerunfailures")

    def seen(self) -> dict[str, list[Any]]:
        """This witness as the file beside JUnit holds it (a worker's: as it sends it, with
        the tests it kept and started; only the whole run's can tell which never started)."""
        self.foreign.update(self.integrity.changed())
        worker = hasattr(self.config, "workerinput")
        dropped = set(self.deselected)
        if not worker:
            dropped.update(self._name(n) for n in self.run.not_started())
        return {
            "raised": [list(r) for r in sorted(self.raised)],
            "recovered": [list(r) for r in sorted(self.recovered)],
            "foreign": sorted(self.foreign),
            "deselected": [list(r) for r in sorted(dropped)],
            "deselected_marks": [
                [*r, mark] for r in sorted(dropped & set(self.marks)) for mark in self.marks[r]
            ],
            "empty": sorted(self.run.empty),
            "skipped_by": [[*r, where] for r, where in sorted(self.skipped_by.items())],
            **(self.run.sent() if worker else {}),
        }

    def add(self, seen: dict[str, list[Any]]) -> None:
        """A worker's witness (:meth:`seen`), added to this one."""
        self.raised.update((c, n) for c, n in seen.get("raised", []))
        self.recovered.update((c, n) for c, n in seen.get("recovered", []))
        self.foreign.update(seen.get("foreign", []))
        self.deselected.update((c, n) for c, n in seen.get("deselected", []))
        for c, n, mark in seen.get("deselected_marks", []):  # each worker collects them all
            self.marks[c, n] = tuple(dict.fromkeys((*self.marks.get((c, n), ()), mark)))
        self.run.empty.update(seen.get("empty", []))
        self.skipped_by.update(((c, n), where) for c, n, where in seen.get("skipped_by", []))
        self.run.add(seen)

    def _name(self, nodeid: str) -> Raised:
        names = mangle_test_address(nodeid)
        classnames = [self.prefix, *names[:-1]] if self.prefix else names[:-1]
        return ".".join(classnames), bin_xml_escape(names[-1])

    def _watch(self, item: pytest.Item) -> Any:
        try:
            return (yield)
        except BaseException as exc:
            if not _expected(item, exc):
                self._noted(item.nodeid)
            elif isinstance(exc, _SKIPS):
                self._skip_seen(item.nodeid, exc)
            raise

    @cached_property
    def installed(self) -> dict[Path, str]:
        """The project's own modules installed apart from its tree (read at the first skip,
        once pytest has set its path)."""
        return installed_files(self.root)

    def _skip_seen(self, nodeid: str, exc: BaseException, module: Path | None = None) -> None:
        """A skip or expected failure raised by the project's code outside its tests (and,
        while a ``module`` is collected, outside it and the packages that hold it)."""

        def excused(path: Path) -> bool:
            return self._test_code(path) or (module is not None and _holds(module, path))

        def believed(frame: Any, path: Path | None) -> bool:  # the tests' code, as it says
            if path is None:  # an example of the doctest that runs, in its namespace
                test, code = self.doctests.get(nodeid), frame.f_code
                if test is None or test.globs is not frame.f_globals:
                    return False
                return code.co_filename.startswith(f"<doctest {test.name}[") and any(
                    code in _codes(compiled) for compiled in _examples(test)
                )
            return not excused(path) or ran_from(frame, path, self.config, self.root, self.tree)

        where = raised_from(exc, self.root, self.config, self.installed, believed)
        if where is None or (not where.made and excused(where.path)):
            return
        named = self._own(where.path) if not where.made else f"{where.path} (made at run time)"
        self.skipped_by[self._name(nodeid)] = f"{named}:{where.line}"

    def _own(self, path: Path) -> str:
        """``path`` (the project's code) below the root, or inside its installation."""
        return self._installed_as(path) or path.relative_to(self.root).as_posix()

    def _installed_as(self, path: Path) -> str | None:
        """``path``'s name inside the project's installation, None where it is not installed."""
        return self.installed.get(path) or installed_copy(path, self.root)

    def _test_code(self, path: Path) -> bool:
        """Where a test may decide to skip: a module tests were collected from, a conftest
        file, or a file whose path below the root (or inside the project's installation) has
        a folder or name that starts with "test" (tests/, testing/, test_helpers.py) outside
        the project's own package; inside the package, only tests/, test/ and test_*
        (its testing.py is the product's, as numpy.testing is)."""
        if self._resolved[0] != len(self.test_files):
            self._resolved = (len(self.test_files), {p.resolve() for p in self.test_files})
        installed = self._installed_as(path)
        own = installed or path.relative_to(self.root).as_posix()
        parts = [p.removesuffix(".py").lower() for p in Path(own).parts]
        package = self._package_at(parts, installed is not None)
        if package is None:
            named = any(p.startswith("test") for p in parts)
        else:
            named = any(p.startswith("test") for p in parts[:package])
            named = named or any(_test_named(p) for p in parts[package + 1 :])
        return named or path.name == "conftest.py" or path in self._resolved[1]

    def _package_at(self, parts: list[str], installed: bool) -> int | None:
        """Which of a path's folders (lower case, without .py) is the project's own package:
        the top one of its installation, or src/'s first below the root, where not named
        test*; else the first of its own packages; None where none is."""
        top = 0 if installed else 1 if len(parts) > 2 and parts[0] == "src" else None
        if top is not None and not parts[top].startswith("test"):
            return top
        return next((i for i, part in enumerate(parts) if part in self.packages), None)

    def _noted(self, nodeid: str) -> None:
        name = self._name(nodeid)
        self.raised.add(name)
        self.recovered.discard(name)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """A pytest-xdist worker starts: the run began as this controller's did."""
        node.workerinput[STARTED_KEY] = self.run.started

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> Any:
        self.collecting = True
        return (yield)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        self.run.item(item)
        if isinstance(item, pytest.Function):  # a doctest's path is the code it documents
            self.test_files.add(Path(item.path))
        elif isinstance(item, DoctestItem):
            self.doctests[item.nodeid] = item.dtest
        self.integrity.hold(item)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        report = yield
        self.run.module_report(collector, report)
        call = getattr(report, "call", None)  # pytest keeps the collection's call on its report
        if report.skipped and getattr(call, "excinfo", None) is not None:
            # a doctest module is the code under test, as is every package that holds it
            tests = None if isinstance(collector, DOCTESTS) else Path(collector.path)
            self._skip_seen(report.nodeid, call.excinfo.value, tests)
        return report

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_pycollect_makeitem(self, collector: pytest.Collector, name: str, obj: object) -> Any:
        result = yield
        self.run.made(collector, name, obj, result)
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> Any:
        self.foreign.update(self.integrity.marked_while_collecting(items))
        return (yield)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The tree as the session starts, conftest files configured."""
        self.tree = tree_state(self.root)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """The marks of the tests pytest was told were dropped (``-m slow`` leaves them to the
        stage that runs that mark); a test dropped unannounced has none."""
        for item in items:
            names = dict.fromkeys(m.name for m in item.iter_markers())
            self.marks[self._name(item.nodeid)] = tuple(names)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Every test collected that the session will not run, however it was dropped."""
        self.deselected.update(self._name(n) for n in self.run.finished(session.items))
        self.foreign.update(self.integrity.collected(session))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        # called through pytest's own relay; the test's hooks, through the session's
        self.foreign.update(filter(None, [self.integrity.session_changed(item.session)]))
        result = yield  # what ends the session (pytest.exit) leaves the test unfinished
        self.run.finish(item)
        return result

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A subtest that failed (pytest's subtests, unittest's subTest): its test raised,
        though the context that ran it caught the exception."""
        if report.failed and type(report).__name__ in SUBTEST_REPORTS:
            self._noted(report.nodeid)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """A skip the project's code raised inside a subtest (pytest's subtests, unittest's
        subTest), whose context catches it: its report is made from the exception."""
        if call.excinfo is not None and isinstance(call.excinfo.value, _SKIPS):
            self._skip_seen(item.nodeid, call.excinfo.value)
        return (yield)

    def pytest_plugin_registered(self, plugin: object, manager: pytest.PytestPluginManager) -> None:
        """A plugin registered once tests are collected: its hooks that are the project's own
        code, a conftest file's aside (a gate file, as any conftest.py), the module itself or
        an object it defines."""
        if not self.collecting or plugin in getattr(manager, "_conftest_plugins", ()):
            return
        for caller in manager.get_hookcallers(plugin) or ():
            for impl in caller.get_hookimpls():
                code = getattr(impl.function, "__code__", None)
                where = own_code(code.co_filename, self.root) if code else "(no source)"
                in_conftest = code is not None and Path(code.co_filename).name == "conftest.py"
                if impl.plugin is not plugin or in_conftest:
                    continue
                if where is not None:
                    self.foreign.add(f"{where}: {caller.name}")
                elif caller.name in RUN_HOOKS:  # library code, or code that says it is
                    self.foreign.add(f"{manager.get_name(plugin)}: {caller.name}")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Any:
        self.foreign.update(filter(None, [self.integrity.marks_changed(item)]))
        name = self._name(item.nodeid)
        if name in self.raised and self.reruns:  # a re-run of a test that raised
            self.raised.discard(name)
            self.recovered.add(name)
        return (yield from self._watch(item))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        self.foreign.update(self.integrity.changed())
        result = yield from self._watch(item)
        # A unittest.TestCase's failures reach pytest through its result object, not raised
        for info in getattr(item, "_excinfo", None) or ():
            if not _expected(item, info.value):
                self._noted(item.nodeid)
            elif isinstance(info.value, _SKIPS):
                self._skip_seen(item.nodeid, info.value)
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Any:
        changed = self.integrity.item_changed(pyfuncitem)
        if changed:
            self.foreign.add(changed)
        return (yield from self._watch(pyfuncitem))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Any:
        return (yield from self._watch(item))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput"):  # the controller writes the file, once
            self.config.workeroutput[self.key] = self.seen()  # type: ignore[attr-defined]
