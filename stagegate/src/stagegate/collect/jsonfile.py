"""JSON files as every reader opens them: a missing, unreadable or malformed file is an
:class:`~stagegate.errors.InputError` that names it and says what is wrong."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from stagegate.errors import InputError, MissingFileError


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


def finite(value: Any) -> float | None:
    """A finite number, or None (JSON null, NaN, infinity, text and booleans all mean: not
    measured)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def whole(value: Any) -> int | None:
    """A whole number (a count), or None."""
    number = finite(value)
    return int(number) if number is not None and number == int(number) else None


def text(value: Any) -> str | None:
    """A string, or None."""
    return value if isinstance(value, str) else None


def load_document(path: Path, what: str, kind: str, version: int) -> dict[str, Any]:
    """A JSON object of ``kind`` at format ``version``; anything else is an InputError."""
    data = load_json(path, what)
    if not isinstance(data, dict) or data.get("kind") != kind:
        raise InputError(f"{what} {path} is not an amptrain result of kind {kind!r}")
    if data.get("format_version") != version:
        raise InputError(
            f"{what} {path} has format_version {data.get('format_version')!r}; "
            f"this stagegate reads {version}"
        )
    return data
