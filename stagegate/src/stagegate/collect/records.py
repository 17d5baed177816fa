"""Stage records: read one, or find every one in a raw directory."""

from __future__ import annotations

import json
from pathlib import Path

from stagegate.collect.jsonfile import load_json
from stagegate.errors import InputError
from stagegate.model import RECORD_FORMAT_VERSION, RECORD_KIND, STAGES, StageRecord


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
    known = set(StageRecord.__dataclass_fields__)
    try:
        return StageRecord(**{k: v for k, v in data.items() if k in known})
    except TypeError as exc:
        raise InputError(f"stage record {path} is missing fields: {exc}") from None


def find_records(raw_dir: Path) -> dict[str, StageRecord]:
    """Every stage record in ``raw_dir``, by stage; two records for one stage is an error."""
    if not raw_dir.is_dir():
        raise InputError(
            f"{raw_dir} is not a directory: run the stages first "
            "(stagegate run STAGE -- COMMAND writes each stage's record)"
        )
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
