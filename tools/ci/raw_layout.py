"""Lay a downloaded stage artifact out as the raw folder the judge reads, refusing anything that
could make stagegate read a file the stage did not produce.

    python tools/ci/raw_layout.py ARTIFACT RAW --stage static --stage execution ... \
        [--prefix reports/raw] [--commit SHA]

The artifact is data written by the code under test. Every stage record in it must be for one
of the expected stages (one record each), name its files by relative paths under the stage's
output folder (``reports/raw/...``: the folder the trusted workflow fixed), and each of those
files must be a plain file inside the artifact. Links, absolute paths, ``..``, paths outside
the folder and records of other commits are refused: a record cannot point the judge at the
default branch's committed baseline or any other file of the judge's checkout. The accepted
files are copied into RAW, which must not exist yet; nothing is copied when anything is
refused (exit 2, and the reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from github_api import shown

RECORD_KIND = "stagegate-record"
MAX_BYTES = 512 * 1024 * 1024  # an artifact larger than this is not a stage's output


class LayoutError(Exception):
    """An artifact the judge must not read, and why."""


def _files_named(record: dict[str, Any]) -> Iterator[str]:
    """Every path a record names, lint files included; anything else is refused."""
    files = record.get("files")
    if not isinstance(files, dict):
        raise LayoutError(f"record {record.get('stage')!r}: 'files' is not an object")
    for kind, value in files.items():
        values = value.values() if isinstance(value, dict) else [value]
        for path in values:
            if not isinstance(path, str):
                raise LayoutError(f"record {record.get('stage')!r}: {shown(kind)} path is not text")
            yield path


def inside(path: str, prefix: str) -> str:
    """``path``'s place inside the stage folder ``prefix``, or a LayoutError saying why not."""
    parts = path.split("/")
    if "\\" in path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise LayoutError(f"{path!r} is not a plain relative path")
    head = prefix.split("/")
    if parts[: len(head)] != head or len(parts) == len(head):
        raise LayoutError(f"{path!r} is outside the stage's folder {prefix}/")
    return "/".join(parts[len(head) :])


def _plain_files(root: Path) -> list[Path]:
    """Every file under ``root``; a link anywhere, or too much data, is refused."""
    found, size = [], 0
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            raise LayoutError(f"{shown(path.relative_to(root))} is a link")
        if path.is_file():
            size += path.stat().st_size
            found.append(path)
        elif not path.is_dir():
            raise LayoutError(f"{shown(path.relative_to(root))} is not a plain file")
    if size > MAX_BYTES:
        raise LayoutError(f"the artifact holds {size} bytes, more than {MAX_BYTES}")
    return found


def _record(path: Path) -> dict[str, Any] | None:
    """The stage record in ``path``, or None for any other file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("kind") == RECORD_KIND else None


def check(artifact: Path, stages: Iterable[str], prefix: str, commit: str | None) -> list[Path]:
    """The artifact's files, once every record in it has been checked."""
    if not artifact.is_dir():
        raise LayoutError("no artifact: the stage job uploaded no records")
    files, wanted, seen = _plain_files(artifact), set(stages), set()
    for path in files:
        record = _record(path)
        if record is None:
            continue
        stage = record.get("stage")
        if stage not in wanted or stage in seen:
            raise LayoutError(f"{shown(path.name)}: a record for stage {stage!r} is not expected")
        seen.add(stage)
        if commit is not None and record.get("commit") != commit:
            raise LayoutError(f"{shown(path.name)}: recorded for commit {record.get('commit')!r}")
        for named in _files_named(record):
            target = artifact / inside(named, prefix)
            if not target.is_file() or target.is_symlink():
                raise LayoutError(f"{shown(path.name)}: {named!r} is not in the artifact")
    if not seen:
        raise LayoutError("the artifact holds no stage record")
    return files


def lay_out(
    artifact: Path, raw: Path, stages: Iterable[str], prefix: str = "reports/raw",
    commit: str | None = None,
) -> list[str]:  # fmt: skip
    """Check ``artifact`` and copy it to ``raw``; the stages whose records it holds."""
    if raw.exists():
        raise LayoutError(f"{raw} exists: the judge lays records out in a fresh folder")
    files = check(artifact, stages, prefix, commit)
    for path in files:
        dest = raw / path.relative_to(artifact)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    return sorted(str(r["stage"]) for p in files if (r := _record(p)) is not None)


def main(argv: list[str] | None = None) -> int:
    """Lay the artifact out, or exit 2 saying what was refused."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("raw", type=Path)
    parser.add_argument("--stage", action="append", required=True, dest="stages")
    parser.add_argument("--prefix", default="reports/raw")
    parser.add_argument("--commit")
    args = parser.parse_args(argv)
    try:
        stages = lay_out(args.artifact, args.raw, args.stages, args.prefix, args.commit)
    except LayoutError as exc:
        print(f"raw_layout: refused: {shown(exc)}", file=sys.stderr)
        return 2
    print(f"raw_layout: {', '.join(stages)} laid out in {args.raw}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
