"""pytest: ``--stagegate-guard DIR`` fails every test that changes DIR.

A stage's results are written to a folder the report reads (``reports/``). A test that writes
into it, cleans it or removes a file from it corrupts the evidence of the stages around it,
and the report would then blame a stage that ran. With the guard, such a test fails, naming
what it changed. Registered by :mod:`stagegate.pytest_plugin`; it does nothing unless asked.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

Snapshot = dict[str, tuple[int, int]]  # path under the folder -> (size, mtime in ns)
_BEFORE = pytest.StashKey[Snapshot]()
_SHOWN = 10  # changes named in one failure


def snapshot(root: Path) -> Snapshot:
    """Every file and folder under ``root`` with its size and modification time."""
    found: Snapshot = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue  # removed while walking
            found[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return found


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """What differs between two snapshots, in words, sorted by path."""
    out = [f"added {p}" for p in after.keys() - before.keys()]
    out += [f"removed {p}" for p in before.keys() - after.keys()]
    out += [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(out, key=lambda line: line.split(" ", 1)[1])


class Guard:
    """Snapshots the folder before each test and fails the test if it differs afterwards."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.stash[_BEFORE] = snapshot(self.root)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when == "teardown" and _BEFORE in item.stash:
            changed = changes(item.stash[_BEFORE], snapshot(self.root))
            if changed and not report.failed:
                report.outcome = "failed"
                report.longrepr = (
                    f"{item.nodeid} changed {self.root}, which tests must never touch "
                    f"(it holds the stages' results): {'; '.join(changed[:_SHOWN])}"
                    + (f"; and {len(changed) - _SHOWN} more" if len(changed) > _SHOWN else "")
                )
        return report


def register(config: pytest.Config, folder: str) -> None:
    """Guard ``folder`` (relative to where pytest was started) for the whole run."""
    root = (Path(config.invocation_params.dir) / folder).resolve()
    config.pluginmanager.register(Guard(root), "stagegate-guard")
