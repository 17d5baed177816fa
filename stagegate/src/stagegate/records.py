"""Stage records: what ``stagegate run`` writes and ``stagegate report`` reads (format 1)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stagegate.errors import InputError, MissingFileError

FORMAT_VERSION = 1
RECORD_KIND = "stagegate-record"
FILE_KINDS = ("junit", "coverage", "warnings", "benchmark", "metrics", "lint")


@dataclass(frozen=True, kw_only=True)
class StageRecord:
    """One run of one stage's command, whatever its outcome."""

    format_version: int = FORMAT_VERSION
    kind: str = RECORD_KIND
    stage: str
    command: list[str]
    exit_code: int | None  # None when killed by a signal or timed out
    signal: int | None = None
    timed_out: bool = False
    start: str  # ISO 8601, UTC
    duration_s: float
    stdout_tail: str = ""
    stderr_tail: str = ""
    commit: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)  # kind -> path, or {tool: path} for lint
    error: str | None = None  # the command could not be started

    @property
    def succeeded(self) -> bool:
        """The command ran to the end and exited 0."""
        return self.exit_code == 0 and not self.timed_out and self.error is None

    def to_json(self) -> str:
        """The record as JSON text."""
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"


def load_json(path: Path, what: str) -> Any:
    """Parse a JSON file; a missing or malformed file is an :class:`InputError` that says so."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingFileError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{what} {path} cannot be read: {exc}") from None
    if not text.strip():
        raise InputError(f"{what} {path} is empty")
    try:
        return json.loads(text, parse_constant=lambda name: math.nan)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{what} {path} is not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None


def load_record(path: Path) -> StageRecord:
    """Read a stage record, checking its format version and fields."""
    data = load_json(path, "stage record")
    if not isinstance(data, dict):
        raise InputError(f"stage record {path} is not a JSON object")
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(
            f"stage record {path} has format_version {version!r}; this stagegate reads "
            f"{FORMAT_VERSION}: re-run the stage with this version"
        )
    known = set(StageRecord.__dataclass_fields__)
    try:
        return StageRecord(**{k: v for k, v in data.items() if k in known})
    except TypeError as exc:
        raise InputError(f"stage record {path} is missing fields: {exc}") from None
