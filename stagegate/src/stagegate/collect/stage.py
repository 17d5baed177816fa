"""Collect the files a stage's record names into :class:`stagegate.model.StageData`.

Collection reads and never decides: a file that is missing, unreadable or refused (outside
the raw directory, changed since the stage ended) is noted as such, and the judge decides
what that means for the stage.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from stagegate.collect.ab import read_ab
from stagegate.collect.benchmark import read_benchmark
from stagegate.collect.files import read_coverage, read_curves, read_warnings
from stagegate.collect.jsonfile import load_json
from stagegate.collect.junit import PytestCounts, read_junit, read_pytest_counts
from stagegate.collect.lint import read_lint
from stagegate.collect.locate import locate
from stagegate.errors import InputError, MissingFileError
from stagegate.model import (
    Benchmark,
    MissingFile,
    RefusedFile,
    StageData,
    StageRecord,
    counts_path,
    gate_witness_path,
)

# kind of file in a record -> (StageData field, reader); "lint" maps tools to files
READERS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "junit": ("suite", read_junit),
    "coverage": ("coverage", read_coverage),
    "warnings": ("warnings", read_warnings),
    "benchmark": ("benchmark", read_benchmark),
    "ab": ("ab", read_ab),
    "metrics": ("curves", read_curves),
}


# Why a file the stage declared, and that is there, is not read as its result
STALE = "it was there before the stage's command started, which left it untouched: an earlier run's"


def _read(reader: Callable[[Path], Any], path: Path) -> Any:
    """Run one reader; a bug in it is reported against the file, never raised past here."""
    try:
        return reader(path)
    except InputError:
        raise
    except Exception as exc:  # any crash becomes a message naming the file
        raise InputError(
            f"{path} could not be read ({type(exc).__name__}: {exc}); the file is kept as it "
            "is: report this as a stagegate bug with the file attached"
        ) from exc


def _junit_reader(
    record: StageRecord, raw_dir: Path, value: str, gate: bool = False
) -> Callable[[Path], Any]:
    """A JUnit file's reader, with what the pytest plugin saw beside it where the record sealed
    that; a file of it that changed after the stage, or appeared after it, is refused. Where
    the record looked for it and it was not there, a pytest file's outcomes are unwitnessed.
    ``gate``: only the gate's own witness beside it counts (the plugin's file is the code
    under test's); a record that did not look for one leaves the outcomes unwitnessed."""
    sibling = gate_witness_path(value) if gate else counts_path(value)
    if sibling not in record.sha256:
        return partial(read_junit, counts=PytestCounts()) if gate else read_junit
    where = locate(record, raw_dir, sibling)
    if where.missing and record.sha256[sibling] is None:
        return partial(read_junit, counts=PytestCounts())
    if sibling in record.stale:
        raise InputError(f"pytest counts file {sibling} is refused: {STALE}")
    if where.refused or where.missing:
        reason = where.refused or "it was there when the stage ended and is gone"
        raise InputError(f"pytest counts file {sibling} is refused: {reason}")
    return partial(read_junit, counts=read_pytest_counts(where.path))


def _readers(record: StageRecord) -> list[tuple[str, str, Callable[[Path], Any] | None, str]]:
    """(kind, path, reader, field) for every file the record names; None for an unknown kind."""
    out: list[tuple[str, str, Callable[[Path], Any] | None, str]] = []
    for kind, path, label in record.named_files():
        if kind == "lint":
            out.append((kind, path, partial(read_lint, label.partition(":")[2]), label))
        else:
            key, reader = READERS.get(kind, ("", None))
            out.append((kind, path, reader, key))
    return out


def collect_stage(record: StageRecord, raw_dir: Path, gate_witness: bool = False) -> StageData:
    """Read every file ``record`` names; a file that cannot be read is noted, not raised.
    ``gate_witness``: a pytest JUnit file is held against the gate's own witness only."""
    found: dict[str, Any] = {"lint": {}}
    errors: list[str] = []
    missing: list[MissingFile] = []
    refused: list[RefusedFile] = []
    for kind, value, reader, key in _readers(record):
        if reader is None:
            errors.append(f"record names an unknown kind of file {kind!r}")
            continue
        if value in record.stale:
            missing.append(MissingFile(kind, value, STALE, stale=True))
            continue
        where = locate(record, raw_dir, value)
        if where.refused:
            refused.append(RefusedFile(kind, value, where.refused))
            continue
        try:
            if kind == "junit":
                reader = _junit_reader(record, raw_dir, value, gate_witness)
            data = _read(reader, where.path)
        except MissingFileError as exc:
            missing.append(MissingFile(kind, value, str(exc), where.disappeared))
        except InputError as exc:
            errors.append(str(exc))
        else:
            if kind == "lint":
                found["lint"][key.partition(":")[2]] = data
            else:
                found[key] = data
    return StageData(
        record=record,
        suite=found.get("suite"),
        coverage=found.get("coverage"),
        warnings=found.get("warnings", ()),
        benchmark=found.get("benchmark"),
        ab=found.get("ab"),
        curves=found.get("curves"),
        lint=found["lint"],
        input_errors=tuple(errors),
        missing_files=tuple(missing),
        refused_files=tuple(refused),
    )


def read_host(path: Path) -> dict[str, Any]:
    """The GPU job's host facts (``host.json``); a file that cannot be read stops the report."""
    host = load_json(path, "host facts (--host)")
    if not isinstance(host, dict):
        raise InputError(
            f"host facts (--host) {path} is not a JSON object: give gpu_stage's host.json"
        )
    return host


def read_baselines(path: Path) -> list[Benchmark]:
    """A baseline benchmark file, or every ``*.json`` benchmark in a directory."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise InputError(f"baseline directory {path} holds no benchmark JSON")
        return [read_benchmark(f) for f in files]
    return [read_benchmark(path)]
