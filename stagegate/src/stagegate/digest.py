"""The sha256 of a file, as ``stagegate run`` records it and ``stagegate report`` checks it."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1024 * 1024


def sha256_file(path: Path) -> str:
    """The hex sha256 of the file at ``path`` (read in chunks: any size, little memory)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
