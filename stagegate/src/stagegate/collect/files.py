"""Coverage JSON (coverage.py), the warnings file of stagegate's pytest plugin, metric curves."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from stagegate.collect.jsonfile import finite, load_json
from stagegate.errors import InputError
from stagegate.model import Coverage, Curves, Dated, FileCoverage, Location, WarningEntry


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where} should be a number, got {value!r}")
    return float(value)


def _percent(value: Any, where: str) -> float:
    """A share of lines covered: a finite number from 0 to 100, or an error naming it."""
    percent = _number(value, where)
    if not (math.isfinite(percent) and 0.0 <= percent <= 100.0):
        raise InputError(
            f"{where} is {value!r}: a coverage percent is 0 to 100; the file was not written "
            "by coverage json as it is: run the stage again"
        )
    return percent


def _count(value: Any, where: str) -> int:
    """How many times a warning was seen: a whole number of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(
            f"{where} is {value!r}: a warning is counted 1 or more times, as a whole number; "
            "the file was not written by pytest --stagegate-warnings as it is"
        )
    return value


def read_coverage(path: Path) -> Coverage:
    """Total and per-file coverage from ``coverage json`` output."""
    data = load_json(path, "coverage file")
    try:
        totals = data["totals"]
        files = data["files"]
    except (KeyError, TypeError):
        raise InputError(
            f"coverage file {path} has no 'totals'/'files': write it with 'coverage json'"
        ) from None
    if not isinstance(files, dict) or not isinstance(totals, dict):
        raise InputError(f"coverage file {path}: 'totals' and 'files' are not objects")
    per_file = [_file_coverage(path, name, entry) for name, entry in sorted(files.items())]
    total = _percent(totals.get("percent_covered"), f"{path}: totals.percent_covered")
    counted = _counts(totals, total, f"coverage file {path}: totals")
    if counted[1] == 0:
        raise InputError(
            f"coverage file {path} measured no line of code (its totals count none): run the "
            "tests with coverage of the package they test (--cov, or [tool.coverage.run] source)"
        )
    if (sum(f.counts[0] for f in per_file), sum(f.counts[1] for f in per_file)) != counted:
        raise InputError(
            f"coverage file {path}: totals count {counted[0]} of {counted[1]} lines and branches "
            "covered, and its files' summaries do not add up to that: it was not written by "
            "'coverage json' as it is"
        )
    meta = data.get("meta")
    written = meta.get("timestamp") if isinstance(meta, dict) else None
    dated = Dated().seen(written if isinstance(written, str) else None, 0.0)
    return Coverage(percent=total, files=tuple(per_file), dated=dated)


COUNTS = ("covered_lines", "num_statements", "covered_branches", "num_branches")


def _counts(summary: dict[str, Any], percent: float, where: str) -> tuple[int, int]:
    """What a summary counts, covered and all (lines and branches, as ``coverage json`` writes
    them); the counts must be whole, the covered no more than all, and give its percent."""
    if not all(k in summary for k in COUNTS[:2]):
        raise InputError(
            f"{where}: no {' and '.join(COUNTS[:2])}, which 'coverage json' writes: a percent "
            "alone is a claim the gate cannot check"
        )
    lines, statements, branches, all_branches = counts = [summary.get(k, 0) for k in COUNTS]
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in counts):
        raise InputError(f"{where}: {', '.join(COUNTS)} must be whole numbers of at least 0")
    if lines > statements or branches > all_branches:
        raise InputError(f"{where}: more lines or branches covered than there are")
    covered, total = lines + branches, statements + all_branches
    if abs((100.0 * covered / total if total else 100.0) - percent) > 0.01:
        raise InputError(
            f"{where}: percent_covered {percent:g} is not the {covered} of {total} lines and "
            "branches it counts"
        )
    return covered, total


def _file_coverage(path: Path, name: str, entry: Any) -> FileCoverage:
    summary = entry.get("summary") if isinstance(entry, dict) else None
    if not isinstance(summary, dict):
        raise InputError(f"coverage file {path}: {name[:200]} has no 'summary' object")
    percent = _percent(summary.get("percent_covered"), f"{path}: {name[:200]} percent_covered")
    counts = _counts(summary, percent, f"coverage file {path}: {name[:200]}")
    missing = entry.get("missing_lines", [])
    if not isinstance(missing, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in missing
    ):
        raise InputError(
            f"coverage file {path}: {name[:200]} missing_lines is not a list of line numbers"
        )
    if len(missing) != summary["num_statements"] - summary["covered_lines"]:
        raise InputError(
            f"coverage file {path}: {name[:200]} lists {len(missing)} missing lines, and its "
            f"summary counts {summary['num_statements'] - summary['covered_lines']} not covered"
        )
    return FileCoverage(name, percent, tuple(missing), counts)


def read_warnings(path: Path) -> tuple[WarningEntry, ...]:
    """Warnings written by ``pytest --stagegate-warnings``."""
    data = load_json(path, "warnings file")
    if not isinstance(data, dict) or not isinstance(data.get("warnings"), list):
        raise InputError(f"warnings file {path} has no 'warnings' list")
    return tuple(_warning(path, i, w) for i, w in enumerate(data["warnings"]))


def _warning(path: Path, i: int, w: Any) -> WarningEntry:
    texts = [w.get(k) for k in ("category", "message", "file")] if isinstance(w, dict) else []
    if len(texts) != 3 or not all(isinstance(t, str) for t in texts):
        raise InputError(f"warnings file {path}: entry {i} lacks category/message/file")
    line = w.get("line")
    if line is not None and (isinstance(line, bool) or not isinstance(line, int) or line < 0):
        raise InputError(f"warnings file {path}: entry {i} line is not a line number")
    count = _count(w.get("count", 1), f"warnings file {path}: entry {i} count")
    category, message, file = texts
    return WarningEntry(category, message, Location(file, line), count)


def read_curves(path: Path) -> Curves:
    """``{"curves": {"name": [numbers]}}``: series to chart, each value a finite number (a
    stage whose run diverged, or that wrote something else, has no figure to show)."""
    data = load_json(path, "metrics file")
    curves = data.get("curves") if isinstance(data, dict) else None
    if not isinstance(curves, dict):
        raise InputError(f"metrics file {path} has no 'curves' object")
    series = {}
    for name, values in curves.items():
        if not isinstance(values, list):
            raise InputError(f"metrics file {path}: curve {name!r} is not a list")
        numbers = [finite(v) for v in values]
        bad = [i for i, v in enumerate(numbers) if v is None]
        if bad:
            raise InputError(
                f"metrics file {path}: curve {str(name)[:80]!r} holds {str(values[bad[0]])[:40]} "
                f"at [{bad[0]}] ({len(bad)} values that are not finite numbers)"
            )
        series[str(name)] = tuple(v for v in numbers if v is not None)
    return Curves(series)
