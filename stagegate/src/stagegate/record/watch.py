"""What the other stages left in the output folder, watched while a stage's command runs.

A command that changes another stage's record, a file that record sealed, or a line the run
log held is named in its own record (``altered``): one stage's code must not rewrite another's
results. Only regular files are read (never a pipe or a device), and every bound is counted:
the files scanned, the records watched, the bytes hashed (past it, a file is watched by its
size and time). What could not be watched is said, never passed over.
"""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stagegate.io import sha256_file
from stagegate.model import RECORD_KIND, RUN_LOG

MAX_SCANNED = 2000  # *.json files read in the folder, looking for records
MAX_WATCHED = 200  # other stages' records watched
MAX_RECORD_BYTES = 4 * 2**20
MAX_HASHED_BYTES = 2**30  # hashed in all; past it a file is watched by its size and time


@dataclass
class Watch:
    """The watched files, each with how it was, and why not everything could be watched."""

    files: dict[Path, str | None] = field(default_factory=dict)
    problem: str = ""
    hashed: int = 0

    def look(self, path: Path) -> str | None:
        """The file as it is: ``sha:HASH`` (``stat:SIZE:TIME`` past the byte budget), ""
        for what is not a regular file, None for nothing there."""
        try:
            st = path.stat()
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return ""
        if self.hashed + st.st_size > MAX_HASHED_BYTES:
            return f"stat:{st.st_size}:{st.st_mtime_ns}"
        self.hashed += st.st_size
        try:
            return f"sha:{sha256_file(path)}"
        except OSError:
            return ""


def _record_of(path: Path) -> dict[str, Any] | None:
    """The record in ``path`` (a regular file of bounded size), or None."""
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RECORD_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("kind") == RECORD_KIND else None


def inside(path: Path, folder: Path) -> bool:
    """``path`` resolves to a place under ``folder``."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        return False


def _others(out_dir: Path, stage: str, w: Watch) -> list[Path]:
    """The other stages' records in ``out_dir`` and the files they seal there, each once."""
    found: dict[Path, None] = {}
    names = sorted(out_dir.glob("*.json"))
    if len(names) > MAX_SCANNED:
        w.problem = f"{len(names)} JSON files in {out_dir}: only {MAX_SCANNED} were read"
    records = 0
    for path in names[:MAX_SCANNED]:
        data = _record_of(path)
        if data is None or data.get("stage") == stage:
            continue
        records += 1
        if records > MAX_WATCHED:
            w.problem = f"more than {MAX_WATCHED} records in {out_dir}: not all were watched"
            break
        sealed = data.get("sha256")
        found[path] = None
        for name in sealed if isinstance(sealed, dict) else ():
            if isinstance(name, str) and inside(Path(name), out_dir):
                found[Path(name)] = None
    return list(found)


def _log(path: Path, size: int | None = None) -> str | None:
    """The run log's first ``size`` bytes (all: None) as ``log:COUNT:SHA``: stages running
    beside this one may append to it, never change what was there."""
    try:
        with path.open("rb") as log:
            head = log.read() if size is None else log.read(size)
    except OSError:
        return None
    return f"log:{len(head)}:{hashlib.sha256(head).hexdigest()}"


def watch(out_dir: Path, stage: str) -> Watch:
    """What the other stages left in ``out_dir``, as it is before this stage's command runs."""
    w = Watch()
    w.files = {path: w.look(path) for path in _others(out_dir, stage, w)}
    w.files[out_dir / RUN_LOG] = _log(out_dir / RUN_LOG)
    return w


def _now(path: Path, before: str) -> str | None:
    kind, _, rest = before.partition(":")
    if kind == "log":
        return _log(path, int(rest.split(":", 1)[0]))
    try:
        st = path.stat()
    except OSError:
        return None
    if kind == "stat" or not stat.S_ISREG(st.st_mode) or st.st_size > MAX_HASHED_BYTES:
        return f"stat:{st.st_size}:{st.st_mtime_ns}"  # a file grown past the budget changed
    try:
        return f"sha:{sha256_file(path)}"
    except OSError:
        return ""


def altered(w: Watch) -> list[str]:
    """The watched files the command changed or removed (one it created was not watched)."""
    return [str(p) for p, was in w.files.items() if was and _now(p, was) != was]
