"""Stage records: read one, find every one in a raw directory, and read the directory's run log
(which stages ``stagegate run`` recorded there, whether or not their records are still there)."""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from stagegate.collect.jsonfile import load_json, parse_json
from stagegate.errors import InputError
from stagegate.model import (
    RECORD_FORMAT_VERSION,
    RECORD_KIND,
    RUN_LOG,
    UNATTRIBUTED,
    StageRecord,
    stage_name_problem,
)

_TEXT, _NUMBER, _INT = (str,), (int, float), (int,)
MAX_DURATION_S = 7 * 24 * 3600  # longer than any CI job may run: such a duration is no run's
_COMMIT = re.compile(r"[0-9a-f]{7,64}")
# field -> the JSON types it may hold (None: null allowed); anything else is refused
_TYPES: dict[str, tuple[tuple[type, ...], bool]] = {
    "stage": (_TEXT, False),
    "command": ((list,), False),
    "exit_code": (_INT, True),
    "signal": (_INT, True),
    "timed_out": ((bool,), False),
    "start": (_TEXT, False),
    "duration_s": (_NUMBER, False),
    "stdout_tail": (_TEXT, False),
    "stderr_tail": (_TEXT, False),
    "commit": (_TEXT, True),
    "environment": ((dict,), False),
    "files": ((dict,), False),
    "error": (_TEXT, True),
    "out_dir": (_TEXT, False),
    "sha256": ((dict,), False),
    "runner_error": (_TEXT, True),
    "uncommitted": ((list,), True),
    "changed_sha256": ((dict,), True),
    "changed_sha256_end": ((dict,), True),
    "altered": ((list,), False),
    "stale": ((list,), False),
}


# What stagegate run observes of the machine (record/machine.py): each fact's JSON types. A fact
# may be null or absent (the judge finds it unobserved); of another type, the record is refused.
_FACTS: dict[str, tuple[type, ...]] = {
    "python": _TEXT,
    "platform": _TEXT,
    "machine": _TEXT,
    "cpu_count": _INT,
    "accelerators": (dict,),
}
_ACCELERATORS: dict[str, tuple[type, ...]] = {
    "probe": _TEXT,
    "found": (bool,),
    "devices": (list,),
    "error": _TEXT,
}
_DEVICE: dict[str, tuple[type, ...]] = {
    "name": _TEXT,
    "driver": _TEXT,
    "memory_mb": _INT,
    "compute_capability": _TEXT,
}


def _wrong_types(where: str, values: dict[str, Any], types: dict[str, tuple[type, ...]]) -> str:
    """The first of ``values`` (null aside) whose JSON type is not the one ``types`` names."""
    for key, allowed in types.items():
        value = values.get(key)
        if value is None:
            continue
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            return f"{where}.{key} holds {type(value).__name__}"
    return ""


def _environment_problem(env: dict[str, Any]) -> str | None:
    """Why the machine the record observed cannot be stagegate run's observation, or None."""
    problem = _wrong_types("environment", env, _FACTS)
    if problem:
        return problem
    cpus = env.get("cpu_count")
    if cpus is not None and cpus < 1:
        return f"environment.cpu_count {cpus} is no machine's CPU count"
    seen = env.get("accelerators") or {}
    problem = _wrong_types("environment.accelerators", seen, _ACCELERATORS)
    for i, device in enumerate([] if problem else seen.get("devices") or []):
        where = f"environment.accelerators.devices[{i}]"
        if not isinstance(device, dict):
            return f"{where} holds {type(device).__name__}"
        problem = problem or _wrong_types(where, device, _DEVICE)
    return problem or None


def _is_text_map(value: Any, nested: bool) -> bool:
    """A dict of text keys to text values (or, with ``nested``, to such dicts)."""
    return isinstance(value, dict) and all(
        isinstance(k, str) and (isinstance(v, str) or (nested and _is_text_map(v, nested=False)))
        for k, v in value.items()
    )


def _type_problem(data: dict[str, Any]) -> str | None:
    """The first field of a record that holds a value of the wrong type, in words."""
    for key, (types, nullable) in _TYPES.items():
        value = data.get(key)
        if key not in data or (value is None and nullable):
            continue
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"{key} holds {type(value).__name__}"
    if not all(isinstance(c, str) for c in data.get("command", [])):
        return "command holds something that is not text"
    for key in ("uncommitted", "altered", "stale"):
        if not all(isinstance(p, str) for p in data.get(key) or []):
            return f"{key} holds something that is not a path"
    if not _is_text_map(data.get("files", {}), nested=True):
        return "files maps a kind to something that is not a path"
    sha = data.get("sha256", {})
    if not all(isinstance(v, str | None) for v in sha.values()):
        return "sha256 holds something that is not a hash"
    for key in ("changed_sha256", "changed_sha256_end"):
        if not _is_text_map(data.get(key) or {}, nested=False):
            return f"{key} maps a path to something that is not a hash"
    environment = _environment_problem(data.get("environment", {}))
    if environment:
        return environment
    commit = data.get("commit")
    if commit is not None and not _COMMIT.fullmatch(commit):
        return f"commit {commit[:80]!r} is not a commit id (7 to 64 hex digits)"
    return _time_problem(data) or stage_name_problem(data.get("stage"))


def _time_problem(data: dict[str, Any]) -> str | None:
    """Why the record's start or duration cannot be a stage run's, or None."""
    duration = data.get("duration_s")
    if isinstance(duration, int | float) and not (0 <= duration <= MAX_DURATION_S):
        return (
            f"duration_s {duration!r} is impossible: a stage runs 0 to {MAX_DURATION_S} s (7 days)"
        )
    start = data.get("start")
    if isinstance(start, str):
        try:
            datetime.fromisoformat(start)
        except ValueError:
            return f"start {start[:80]!r} is not an ISO 8601 time (stagegate run writes one)"
    return None


def load_record(path: Path) -> StageRecord:
    """Read a stage record, checking its format version and fields."""
    data = load_json(path, "stage record")
    if not isinstance(data, dict):
        raise InputError(f"stage record {path} is not a JSON object")
    version = data.get("format_version")
    if version != RECORD_FORMAT_VERSION:
        raise InputError(
            f"stage record {path} has format_version {version!r}; this stagegate reads "
            f"{RECORD_FORMAT_VERSION}: re-run the stage with this version"
        )
    problem = _type_problem(data)
    if problem:
        raise InputError(f"stage record {path} is refused: {problem}")
    known = set(StageRecord.__dataclass_fields__)
    try:
        return StageRecord(**{k: v for k, v in data.items() if k in known})
    except TypeError as exc:
        raise InputError(f"stage record {path} is missing fields: {exc}") from None


MAX_RECORD_BYTES = 4 * 2**20  # two 8,000-character tails, the command and the environment


@dataclass(frozen=True)
class RecordScan:
    """The records of a raw directory, by stage, and the stages whose record cannot be used
    (a broken file named after the stage, or two records of one stage), each with why."""

    records: dict[str, StageRecord] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


Scanned = tuple[StageRecord | None, str, str | None]


def _printable(text: str) -> str:
    """``text`` with the bytes of a file name that is not UTF-8 (held as lone surrogates, as
    Python reads such names) written as their escapes: ``\\xff``."""
    try:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name holds
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _scan(path: Path, expected: Collection[str]) -> Scanned:
    """(the record, its stage, None); (None, stage, why) for a file named after an expected
    stage, or holding a record (of :data:`UNATTRIBUTED` where it names no possible stage),
    that cannot be used; (None, "", None) for some other stage output. A link is never read
    through: stagegate run writes each record as a file, so a link is its stage's problem (of
    :data:`UNATTRIBUTED` where it is named after no expected stage)."""
    stage = path.stem if path.stem in expected else ""
    if path.is_symlink():
        return None, stage or UNATTRIBUTED, f"{path} is a link: a record is never read through one"
    try:
        data = load_json(path, "stage record", MAX_RECORD_BYTES)
    except InputError as exc:
        return None, stage, str(exc) if stage else None
    if not isinstance(data, dict) or data.get("kind") != RECORD_KIND:
        return None, "", None
    try:
        record = load_record(path)
    except InputError as exc:
        claimed = data.get("stage")
        stage = stage or (claimed if stage_name_problem(claimed) is None else UNATTRIBUTED)
        return None, stage, str(exc)
    return record, record.stage, None


def find_records(raw_dir: Path, expected: Collection[str] = ()) -> RecordScan:
    """Every stage record in ``raw_dir``, by stage. A file named after one of the ``expected``
    stages that is no usable record, and a stage recorded twice, are problems of that stage
    (the judge blocks it); a directory that does not exist is an InputError. A file name that
    is not UTF-8 is named by its escapes (``\\xff``)."""
    if not raw_dir.is_dir():
        raise InputError(
            f"{raw_dir} is not a directory: run the stages first "
            "(stagegate run STAGE -- COMMAND writes each stage's record)"
        )
    found: dict[str, list[tuple[Path, StageRecord]]] = {}
    problems: dict[str, str] = {}
    for path in sorted(raw_dir.glob("*.json")):
        record, stage, problem = _scan(path, expected)
        if problem is not None:
            problems.setdefault(stage, _printable(problem))
        if record is not None:
            found.setdefault(stage, []).append((path, record))
    records = {}
    for stage, entries in found.items():
        if len(entries) > 1:
            paths = " and ".join(_printable(str(p)) for p, _ in entries)
            problems.setdefault(stage, f"two records for stage {stage!r}: {paths}")
        elif stage not in problems:
            records[stage] = entries[0][1]
    return RecordScan(records, problems)


MAX_RUN_LOG_BYTES = 4 * 2**20  # one short line per stage run
MAX_LOG_LINE = 4096


def read_run_log(raw_dir: Path) -> dict[str, str]:
    """Stage -> the start of its last run that ``stagegate run`` logged in ``raw_dir``; lines
    that are not such entries are skipped (the log only tells a removed record from none).
    A log too large to be stagegate's is read for its last entries only."""
    path = raw_dir / RUN_LOG
    try:
        if not path.is_file():
            return {}
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - MAX_RUN_LOG_BYTES))
            lines = f.read(MAX_RUN_LOG_BYTES).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return {}
    runs: dict[str, str] = {}
    for line in lines:
        try:
            entry = parse_json(line) if len(line) <= MAX_LOG_LINE else None
        except ValueError:
            continue
        if isinstance(entry, dict) and not stage_name_problem(entry.get("stage")):
            runs[entry["stage"]] = str(entry.get("start", "?"))[:40]
    return runs
