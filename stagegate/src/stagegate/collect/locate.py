"""Where a file a record names lies in the raw directory, and whether it may be read.

A record names its files as the stage's command was given them (``reports/raw/junit.xml``),
under the folder the record was written to (``out_dir``). Collection reads each one from the
same place under the raw directory it was given, wherever that now is, and refuses any that
resolves outside that directory (``..``, an absolute path, a link), that changed after the
stage ended (its sha256 no longer matches the record's), or whose hash the record lacks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePath

from stagegate.io import sha256_file
from stagegate.model import StageRecord


@dataclass(frozen=True)
class Located:
    """A named file's place in the raw directory, or why it cannot be read from there."""

    path: Path
    refused: str = ""  # why it must not be read
    missing: bool = False
    disappeared: bool = False  # missing, though the stage ended with it written


def _under_out_dir(record: StageRecord, value: str) -> PurePath | None:
    """``value`` relative to the record's ``out_dir``, or None when it is not under it."""
    if not record.out_dir:
        return None
    named = PurePath(os.path.normpath(value))
    folder = PurePath(os.path.normpath(record.out_dir))
    if named == folder or not named.is_relative_to(folder):
        return None
    return named.relative_to(folder)


def _candidate(record: StageRecord, raw_dir: Path, value: str) -> Path | None:
    """Where ``value`` is in ``raw_dir``; None for a path outside the record's ``out_dir``."""
    inside = _under_out_dir(record, value)
    if inside is not None:
        return raw_dir / inside
    if record.out_dir:
        return None
    path = Path(value)  # a record without out_dir: as named, else moved into raw_dir
    return path if path.exists() or path.is_symlink() else raw_dir / path.name


def _hash_problem(record: StageRecord, value: str, path: Path) -> str:
    if value not in record.sha256:
        return "the record holds no sha256 for it: it was not written by stagegate run"
    expected = record.sha256[value]
    if expected is None:
        return "it was not there when the stage ended: something wrote it afterwards"
    try:
        actual = sha256_file(path)
    except OSError as exc:
        return f"it cannot be read: {exc.strerror or exc}"
    if actual != expected:
        return (
            f"it changed after the stage ended (sha256 {actual[:12]}..., the record says "
            f"{expected[:12]}...)"
        )
    return ""


def locate(record: StageRecord, raw_dir: Path, value: str) -> Located:
    """The file ``value`` of ``record`` in ``raw_dir``, checked before anything reads it."""
    path = _candidate(record, raw_dir, value)
    if path is None:
        return Located(
            Path(value),
            refused=f"it is outside the raw directory {raw_dir}: not under the folder the "
            f"record was written to ({record.out_dir})",
        )
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        return Located(path, refused=f"its path cannot be resolved: {exc}")
    if not real.is_relative_to(raw_dir.resolve()):
        return Located(path, refused=f"it resolves outside the raw directory {raw_dir}")
    if not real.exists():
        return Located(path, missing=True, disappeared=bool(record.sha256.get(value)))
    if not real.is_file():
        return Located(path, refused="it is not a plain file")
    return Located(path, refused=_hash_problem(record, value, real))
