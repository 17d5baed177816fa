"""Read every stage record in a raw directory and collect the files each one names."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from stagegate.baseline import compare_to_baseline
from stagegate.collect import (
    read_benchmark,
    read_coverage,
    read_curves,
    read_junit,
    read_lint,
    read_warnings,
)
from stagegate.errors import InputError, MissingFileError
from stagegate.judge import StageData
from stagegate.model import Benchmark
from stagegate.policy import STAGES
from stagegate.records import RECORD_KIND, StageRecord, load_record


def find_records(raw_dir: Path) -> dict[str, StageRecord]:
    """Every stage record in ``raw_dir``, by stage; two records for one stage is an error."""
    if not raw_dir.is_dir():
        raise InputError(f"{raw_dir} is not a directory: run the stages first (nox -s verify)")
    records: dict[str, tuple[Path, StageRecord]] = {}
    for path in sorted(raw_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, OSError):
            if path.stem in STAGES:  # a record is named after its stage: this one is broken
                load_record(path)  # raises an InputError that says what is wrong
            continue  # some other stage output: judged when a record names it
        if not isinstance(data, dict) or data.get("kind") != RECORD_KIND:
            continue
        record = load_record(path)
        if record.stage in records:
            other = records[record.stage][0]
            raise InputError(
                f"two records for stage {record.stage!r}: {other} and {path}; remove the stale one"
            )
        records[record.stage] = (path, record)
    return {stage: rec for stage, (_, rec) in records.items()}


def _resolve(raw_dir: Path, value: str) -> Path:
    # Paths are recorded relative to where the stage ran; artifacts may have moved into raw_dir.
    path = Path(value)
    if path.exists():
        return path
    moved = raw_dir / path.name
    return moved if moved.exists() else path


def pick_baseline(current: Benchmark, baselines: list[Benchmark]) -> Benchmark | None:
    """The baseline measured on the same GPU and preset as ``current``, else the first one
    (which the comparison then reports as not comparable)."""
    same = [b for b in baselines if (b.gpu_name, b.preset) == (current.gpu_name, current.preset)]
    return (same or baselines or [None])[0]


SIDE_FILES = ("metrics", "warnings")  # optional: their absence is noted, not an unreadable stage
_READERS = {
    "junit": ("suite", read_junit),
    "coverage": ("coverage", read_coverage),
    "warnings": ("warnings", read_warnings),
    "benchmark": ("benchmark", read_benchmark),
    "metrics": ("curves", read_curves),
}


def _read(reader: Callable[[Path], Any], path: Path) -> Any:
    """Run one collector; a bug in it is reported against the file, never raised past here."""
    try:
        return reader(path)
    except InputError:
        raise
    except Exception as exc:  # any crash becomes a message naming the file
        raise InputError(
            f"{path} could not be read ({type(exc).__name__}: {exc}); the file is kept as it "
            "is: report this as a stagegate bug with the file attached"
        ) from exc


def collect_stage(
    record: StageRecord, raw_dir: Path, baselines: list[Benchmark], margin_pct: float
) -> StageData:
    """Collect the files ``record`` names; a file that cannot be read becomes an input error.

    A benchmark is compared with the matching one of ``baselines``.
    """
    found: dict[str, Any] = {"lint": {}}
    errors: list[str] = []
    missing: list[str] = []
    for kind, value in record.files.items():
        try:
            if kind == "lint":
                for tool, path in value.items():
                    found["lint"][tool] = _read(partial(read_lint, tool), _resolve(raw_dir, path))
            elif kind in _READERS:
                key, reader = _READERS[kind]
                found[key] = _read(reader, _resolve(raw_dir, value))
            else:
                errors.append(f"record names an unknown kind of file {kind!r}")
        except MissingFileError as exc:
            (missing if kind in SIDE_FILES else errors).append(
                Path(value).name if kind in SIDE_FILES else str(exc)
            )
        except InputError as exc:
            errors.append(str(exc))
    bench = found.get("benchmark")
    baseline = pick_baseline(bench, baselines) if bench is not None else None
    comparison = compare_to_baseline(bench, baseline, margin_pct) if baseline else None
    return StageData(
        record=record,
        suite=found.get("suite"),
        coverage=found.get("coverage"),
        warnings=found.get("warnings", ()),
        benchmark=bench,
        curves=found.get("curves"),
        lint=found["lint"],
        input_errors=tuple(errors),
        missing_side_files=tuple(missing),
        baseline=comparison,
    )
