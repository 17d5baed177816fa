"""What a pytest run collected and did not run, for its witness: tests dropped from the session
once collected (``-m``, ``-k``, ``--deselect``, a hook that removes them), tests kept that never
started or never finished (``session.items`` cut short, ``pytest.exit`` with status 0), test
files that yielded no test, and what the module names as a test that yielded none
(``__test__ = False``, a class with ``__init__``, a unittest.TestCase with tests whatever its
name, a test function wrapped in an object pytest does not collect).

Only pytest and the standard library are imported: the gate mounts this folder alone."""

from __future__ import annotations

import os
import stat
import unittest
from typing import Any

import pytest
from _pytest.fixtures import getfixturemarker


def _defined_here(collector: pytest.Collector, obj: object) -> bool:
    """Whether ``obj`` is the collected module's own (not imported into it)."""
    module = getattr(getattr(collector, "module", None), "__name__", None)
    return module is not None and getattr(obj, "__module__", None) == module


def _test_class(collector: pytest.Collector, name: str, cls: type) -> bool:
    """Whether ``cls`` is named as a test class and defines a method named as a test, or is a
    unittest.TestCase with a test method, its own or inherited (pytest collects those
    whatever their name)."""
    if issubclass(cls, unittest.TestCase):
        return bool(unittest.TestLoader().getTestCaseNames(cls))
    test = collector.funcnamefilter  # type: ignore[attr-defined]
    named_as_test = collector.classnamefilter(name)  # type: ignore[attr-defined]
    return named_as_test and any(callable(v) and test(k) for k, v in vars(cls).items())


class Collected:
    """One process's view; the controller merges its workers' (:meth:`add`)."""

    def __init__(self, started: int) -> None:
        self.started = started  # as the run began, by the clock files are dated with
        self.collected: set[str] = set()  # node ids, as collected
        self.kept: set[str] = set()  # ... still in the session when collection ended
        self.finished_ids: set[str] = set()  # ... whose run began and ended
        self.empty: set[str] = set()  # test files and test-named objects that yielded none
        self.classes: set[type] = set()  # the classes of the tests collected
        self.candidates: dict[str, type] = {}  # test classes: node id -> class

    def item(self, item: pytest.Item) -> None:
        self.collected.add(item.nodeid)
        cls = getattr(item, "cls", None)
        if cls is not None:
            self.classes.add(cls)

    def module_report(self, collector: pytest.Collector, report: pytest.CollectReport) -> None:
        """A test module collected without error that yielded nothing (a doctest module holds
        no test where it holds no example, as a doctest text file does that no one changed
        since the run began: ``requirements/test.txt``)."""
        module = isinstance(collector, pytest.Module)
        kind = type(collector).__name__
        doctest = kind == "DoctestModule" or (kind == "DoctestTextfile" and self._kept(collector))
        if module and not doctest and report.passed and not report.result:
            self.empty.add(report.nodeid)

    def _kept(self, collector: pytest.Collector) -> bool:
        """Whether the collector's file, a file and no link, was last changed before the run
        began (its status change time, which no one sets back)."""
        try:
            status = os.lstat(collector.path)
        except OSError:
            return False
        return stat.S_ISREG(status.st_mode) and status.st_ctime_ns < self.started

    def made(self, collector: pytest.Collector, name: str, obj: object, result: Any) -> None:
        """What pytest made of a module's or class's attribute: a test-named function or other
        callable of the module's own that yielded no test is noted; a test class with test
        methods is a candidate until collection ends."""
        if not _defined_here(collector, obj):
            return
        nodeid = f"{collector.nodeid}::{name}"
        if isinstance(obj, type):
            if _test_class(collector, name, obj):
                self.candidates[nodeid] = obj
            return
        test = callable(obj) and getfixturemarker(obj) is None
        if not result and test and collector.funcnamefilter(name):  # type: ignore[attr-defined]
            self.empty.add(nodeid)

    def finished(self, items: list[pytest.Item]) -> set[str]:
        """Collection ended: hold the session's tests; the node ids dropped from it. A candidate
        class none of whose subclasses (itself included) holds a test collected is empty."""
        self.kept = {item.nodeid for item in items}
        for nodeid, cls in self.candidates.items():
            if not any(issubclass(c, cls) for c in self.classes):
                self.empty.add(nodeid)
        return self.collected - self.kept

    def finish(self, item: pytest.Item) -> None:
        self.finished_ids.add(item.nodeid)

    def not_started(self) -> set[str]:
        """The tests kept in the session whose run never began or never ended (a session
        ended inside it)."""
        return self.kept - self.finished_ids

    def sent(self) -> dict[str, list[str]]:
        """What a pytest-xdist worker sends: each worker runs a part of the tests it keeps."""
        return {"kept": sorted(self.kept), "finished": sorted(self.finished_ids)}

    def add(self, sent: dict[str, Any]) -> None:
        self.kept.update(sent.get("kept", []))
        self.finished_ids.update(sent.get("finished", []))
