"""pytest plugin: ``--stagegate-warnings FILE`` writes every captured warning, grouped, as JSON.

Registered through the ``pytest11`` entry point; it does nothing unless the option is given.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stagegate.io import write_atomic

FORMAT_VERSION = 1


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stagegate-warnings",
        metavar="FILE",
        default=None,
        help="write the warnings captured during the run to FILE (JSON), for stagegate",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--stagegate-warnings")
    if path:
        config.pluginmanager.register(WarningRecorder(Path(path)), "stagegate-warnings")


class WarningRecorder:
    """Counts warnings by (category, message, location) and writes them when the run ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.counts: Counter[tuple[str, str, str, int]] = Counter()

    def pytest_warning_recorded(
        self, warning_message: warnings.WarningMessage, when: str, nodeid: str, location: Any
    ) -> None:
        file = warning_message.filename
        with contextlib.suppress(ValueError):  # outside the project: keep the absolute path
            file = str(Path(file).resolve().relative_to(Path.cwd()))
        key = (
            warning_message.category.__name__,
            str(warning_message.message).strip(),
            file,
            warning_message.lineno,
        )
        self.counts[key] += 1

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        records = [
            {"category": c, "message": m, "file": f, "line": line, "count": n}
            for (c, m, f, line), n in sorted(self.counts.items())
        ]
        doc = {"format_version": FORMAT_VERSION, "warnings": records}
        write_atomic(self.path, json.dumps(doc, indent=2) + "\n")
