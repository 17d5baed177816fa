"""File input and output: JSON read with errors that say what is wrong, every write atomic."""

from __future__ import annotations

import json
import math
import os
import tempfile
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


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename: never a half file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
