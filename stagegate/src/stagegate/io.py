"""Files: every file stagegate writes goes through here, atomically; and the digest every file
it seals or checks is named by."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename: never a half file.
    A character UTF-8 cannot encode (a lone surrogate) is written as its escape, ``\\ud800``:
    no text stops a report from being written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


_CHUNK = 1024 * 1024


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file, not a link, of at most ``max_bytes``;
    else None. Neither a FIFO (no writer: a read waits forever) nor a link to an endless
    device (``/dev/zero``) is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        data = f.read(max_bytes + 1)
    return data if len(data) <= max_bytes else None


def sha256_file(path: Path) -> str:
    """The hex sha256 of the file at ``path`` (read in chunks: any size, little memory)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
