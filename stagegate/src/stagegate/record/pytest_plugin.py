"""pytest plugin: ``--stagegate-warnings FILE`` writes every captured warning, grouped, as JSON;
``--stagegate-guard DIR`` fails every test that changes DIR (stagegate.record.pytest_guard); and
where pytest writes JUnit (``--junitxml F``), ``F.counts.json`` beside it holds what this plugin
saw itself, apart from pytest's reports:

- the subtests' reports, which pytest counts in ``tests=`` but writes into their test's element
  (stagegate reads a pytest file's ``tests=`` against its elements plus these);
- what :mod:`stagegate.record.pytest_witness` saw: every test whose setup, call or teardown
  raised (a skip or an expected failure aside), named as pytest's JUnit writer names it, those
  that raised and then passed when run again, the hooks and replaced pytest functions that
  could run or report tests unseen, and the tests collected that the run dropped (and test
  files that yielded none). stagegate holds the file's outcomes against these, and looks for
  the dropped tests in the other stages' results.

Registered through the ``pytest11`` entry point; it does nothing unless one of those is given.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from stagegate.io import write_atomic
from stagegate.model import counts_path
from stagegate.record.pytest_guard import register as register_guard
from stagegate.record.pytest_witness import (
    OutcomeWitness,
    in_project,
    junit_written,
    note_packages,
)
from stagegate.record.witness_file import JUnitSidecar

FORMAT_VERSION = 1  # of the warnings file
WORKER_KEY = "stagegate_warnings"  # a pytest-xdist worker's records, in its workeroutput
Key = tuple[str, str, str, int]  # category, message, file, line


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stagegate-warnings",
        metavar="FILE",
        default=None,
        help="write the warnings captured during the run to FILE (JSON), for stagegate",
    )
    parser.addoption(
        "--stagegate-guard",
        metavar="DIR",
        default=None,
        help="fail every test that changes DIR (the folder stage results are written to)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Before the first conftest.py: what the project's own packages are."""
    note_packages(early_config)


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--stagegate-warnings")
    if path:
        recorder = WarningRecorder(Path(path), Path(config.rootpath).resolve(), config)
        config.pluginmanager.register(recorder, "stagegate-warnings")
    guarded = config.getoption("--stagegate-guard")
    if guarded:
        register_guard(config, guarded)
    junit = getattr(config.option, "xmlpath", None)
    if not junit:
        return
    witness = OutcomeWitness(config, Path(config.rootpath).resolve())
    config.pluginmanager.register(witness, "stagegate-outcomes")
    if not hasattr(config, "workerinput"):  # where the JUnit file is written
        where = Path(counts_path(str(junit_written(junit))))
        config.pluginmanager.register(JUnitSidecar(where, witness), "stagegate-junit-counts")


def project_frame(root: Path, frame: FrameType | None) -> tuple[str, int] | None:
    """The innermost frame at or outside ``frame`` that is the project's own code."""
    while frame is not None:
        relative = in_project(frame.f_code.co_filename, root)
        if relative is not None:
            return relative, frame.f_lineno
        frame = frame.f_back
    return None


class WarningRecorder:
    """Counts warnings by (category, message, location) and writes them when the run ends.

    A warning raised inside a dependency on behalf of the project's call (a deprecated API
    whose warning points at the library's own line) is located at the innermost frame of the
    project's code on the stack when it was raised.
    """

    def __init__(self, path: Path, root: Path, config: pytest.Config) -> None:
        self.path, self.root, self.config = path, root, config
        self.counts: Counter[Key] = Counter()
        # Every pytest-xdist worker collects every test: its collection warnings are counted
        # once (the largest count of any worker), as a run without workers counts them.
        self.collected: Counter[Key] = Counter()

    def _role(self) -> str:
        """The process's part: a pytest-xdist "worker", the "controller" that runs workers, or
        "alone"."""
        if hasattr(self.config, "workerinput"):
            return "worker"
        return "controller" if self.config.pluginmanager.has_plugin("dsession") else "alone"

    @pytest.hookimpl(wrapper=True, trylast=True)  # inside pytest's own catch_warnings
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        shown = warnings._showwarnmsg_impl  # type: ignore[attr-defined]

        def locate(message: warnings.WarningMessage) -> None:
            if in_project(message.filename, self.root) is None:
                message.stagegate_origin = project_frame(self.root, sys._getframe(1))  # type: ignore[attr-defined]
            shown(message)

        warnings._showwarnmsg_impl = locate  # type: ignore[attr-defined]
        try:
            return (yield)
        finally:
            warnings._showwarnmsg_impl = shown  # type: ignore[attr-defined]

    def pytest_warning_recorded(
        self, warning_message: warnings.WarningMessage, when: str, nodeid: str, location: Any
    ) -> None:
        # A controller also gets its workers' warnings, re-made without the project frame they
        # were located at: it counts them from the workers' own records (pytest_testnodedown).
        # The configuration's warnings are the controller's own; each worker would repeat them.
        role = self._role()
        if (role == "controller") != (when == "config") and role != "alone":
            return
        origin = getattr(warning_message, "stagegate_origin", None)
        file, line = origin or (warning_message.filename, warning_message.lineno)
        file = in_project(file, self.root) or file  # outside the project: the absolute path
        key = (
            warning_message.category.__name__,
            str(warning_message.message).strip(),
            file,
            line,
        )
        (self.collected if when == "collect" else self.counts)[key] += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A pytest-xdist worker ended: add the warnings it recorded."""
        output = getattr(node, "workeroutput", {}).get(WORKER_KEY, {})
        for record in output.get("counts", []):
            self.counts[_key(record)] += record["count"]
        for record in output.get("collected", []):
            key = _key(record)
            self.collected[key] = max(self.collected[key], record["count"])

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._role() == "worker":  # the controller writes the file, once
            self.config.workeroutput[WORKER_KEY] = {  # type: ignore[attr-defined]
                "counts": _records(self.counts),
                "collected": _records(self.collected),
            }
            return
        doc = {"format_version": FORMAT_VERSION, "warnings": _records(self.counts + self.collected)}
        write_atomic(self.path, json.dumps(doc, indent=2) + "\n")


def _records(counts: Counter[Key]) -> list[dict[str, Any]]:
    return [
        {"category": c, "message": m, "file": f, "line": line, "count": n}
        for (c, m, f, line), n in sorted(counts.items())
    ]


def _key(record: dict[str, Any]) -> Key:
    return (record["category"], record["message"], record["file"], record["line"])
