"""The file beside a JUnit file in which a witness says what it saw, and the gate's own witness.

stagegate's pytest plugin writes ``JUNIT.counts.json`` through :class:`JUnitSidecar`. Loaded as
a pytest plugin of its own (``PYTEST_PLUGINS=...witness_file``), this module is the gate's
witness: another :class:`~stagegate.record.pytest_witness.OutcomeWitness`, which writes
``JUNIT.witness.json`` and has no options. On GitHub the default branch's copy of this folder
runs beside the change's tests, mounted read-only as a package of its own
(tools/ci/cpu_stage.py), so what the judge holds the JUnit file against is not the change's
code. It imports only pytest, the standard library and this folder's witness modules; what
it writes with is bound as it is imported, before any test module could patch it.
"""

from __future__ import annotations

from json import dumps
from os import fdopen
from os import replace as _rename
from pathlib import Path
from tempfile import mkstemp
from typing import Any

import pytest

from .pytest_witness import SUBTEST_REPORTS, OutcomeWitness, junit_written, note_packages

FORMAT_VERSION = 4  # 2: the witness's lists; 3: what the run dropped; 4: what skipped tests
GATE_SUFFIX = ".witness.json"
GATE_KEY = "stagegate_gate_raised"  # a pytest-xdist worker's gate witness, in its workeroutput


def _replace(path: Path, text: str) -> None:
    """Write ``text`` through a temporary file and a rename (stagegate.io.write_atomic, which
    this module cannot import: the gate mounts this folder alone)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        _rename(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class JUnitSidecar:
    """The file beside JUnit (``path``), written by the process that writes JUnit
    (pytest-xdist's controller): the reports pytest's JUnit writer counts in ``tests=`` that
    add no test case (a subtest's pass of the call, failure or skip; a skip in a teardown),
    counted as it receives them, and what the witness in this process and each worker's saw."""

    def __init__(self, path: Path, witness: OutcomeWitness) -> None:
        self.path = path
        self.subtest_reports = 0
        self.witness = witness

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        counted = report.when == "call" or not report.passed
        self.subtest_reports += counted and type(report).__name__ in SUBTEST_REPORTS
        self.subtest_reports += report.when == "teardown" and report.skipped

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A pytest-xdist worker ended: add what its witness saw."""
        self.witness.add(getattr(node, "workeroutput", {}).get(self.witness.key, {}))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        doc = {
            "format_version": FORMAT_VERSION,
            "subtest_reports": self.subtest_reports,
            **self.witness.seen(),
        }
        _replace(self.path, dumps(doc) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Before the first conftest.py: what the project's own packages are."""
    note_packages(early_config)


def pytest_configure(config: pytest.Config) -> None:
    """As the gate's witness: where pytest writes JUnit, witness the run and write
    ``JUNIT.witness.json``."""
    junit = getattr(config.option, "xmlpath", None)
    if not junit:
        return
    witness = OutcomeWitness(config, Path(config.rootpath).resolve(), key=GATE_KEY)
    config.pluginmanager.register(witness, "stagegate-gate-outcomes")
    if not hasattr(config, "workerinput"):  # where the JUnit file is written
        where = Path(f"{junit_written(junit)}{GATE_SUFFIX}")
        config.pluginmanager.register(JUnitSidecar(where, witness), "stagegate-gate-file")
