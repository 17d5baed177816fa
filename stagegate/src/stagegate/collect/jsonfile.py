"""JSON files as every reader opens them: strictly and within bounds.

A file that is missing, unreadable or malformed is an :class:`~stagegate.errors.InputError`
that names it and says what is wrong; so is one that is larger than a reader's bound, nests
deeper than :data:`MAX_DEPTH`, holds a key twice (which value a reader would see depends on
the parser), an integer longer than :data:`MAX_INT_DIGITS` digits, or a ``NaN``/``Infinity``
literal (not JSON; the producers write ``null`` for "not measured"). Where the problem sits
inside the document, the message names its path (``$.precisions["bf16-mixed"].window_s[3]``).
A lone surrogate escape (``"\\ud800"``, valid JSON, no character) reaches no reader: it is read
as U+FFFD, the replacement character, so every string read can be written as UTF-8.
"""

from __future__ import annotations

import json
import math
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stagegate.errors import InputError, MissingFileError
from stagegate.model import MachineClaim

MAX_JSON_BYTES = 64 * 2**20  # a benchmark with raw windows is about 1 MB; lint output of a
# large repository a few MB
MAX_DEPTH = 64  # the deepest file any producer writes nests 6 levels
MAX_INT_DIGITS = 30  # counts, sizes and nanoseconds fit in 20


class _Duplicated(dict):  # type: ignore[type-arg]
    """An object that held a key twice: the first such key."""

    duplicate: str = ""


class _Invalid:
    """A value the parser met that no reader may see: what it was, in words."""

    def __init__(self, what: str) -> None:
        self.what = what


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    marked = _Duplicated(obj)
    marked.duplicate = dup
    return marked


def _integer(text: str) -> int | _Invalid:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return _Invalid(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _constant(name: str) -> _Invalid:
    return _Invalid(f"the literal {name}, which is not JSON (write null)")


Trail = tuple[Any, str | int] | None  # (the parent's trail, this key): built as it is walked


def _path(trail: Trail) -> str:
    """``$.precisions["bf16-mixed"].window_s[3]`` for a trail."""
    keys: list[str | int] = []
    while trail is not None:
        trail, key = trail
        keys.append(key)
    out = "$"
    for key in reversed(keys):
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            out += f".{key}" if key.isidentifier() else f"[{json.dumps(key)[:60]}]"
    return out if len(out) <= 200 else f"{out[:100]}...{out[-80:]}"


def _walk(value: Any) -> Iterator[tuple[Trail, int, Any]]:
    """(trail, depth, value) of every value in the document, without recursion."""
    stack: list[tuple[Trail, int, Any]] = [(None, 1, value)]
    while stack:
        trail, depth, item = stack.pop()
        yield trail, depth, item
        if isinstance(item, dict):
            stack.extend(((trail, k), depth + 1, v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend(((trail, i), depth + 1, v) for i, v in enumerate(item))


def _problem(document: Any) -> str | None:
    """The first thing in a parsed document that no reader may see, with its path."""
    for trail, depth, item in _walk(document):
        if depth > MAX_DEPTH:
            return f"nests deeper than {MAX_DEPTH} levels (at {_path(trail)})"
        if isinstance(item, _Duplicated):
            return f"holds the key {item.duplicate[:80]!r} twice at {_path(trail)}"
        if isinstance(item, _Invalid):
            return f"holds {item.what} at {_path(trail)}"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # in the JSON text: \ud800 to \udfff


def _mended(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings and keys read as U+FFFD (a pair
    escaped as two is one character already). Called on a checked document: its depth is
    bounded."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_mended(k): _mended(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mended(v) for v in value]
    return value


def parse_json(text: str) -> Any:
    """Parse ``text`` strictly; a ValueError says what is wrong and where."""
    try:
        document = json.loads(
            text, object_pairs_hook=_pairs, parse_int=_integer, parse_constant=_constant
        )
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ValueError(f"nests deeper than {MAX_DEPTH} levels") from None
    problem = _problem(document)
    if problem:
        raise ValueError(problem)
    return _mended(document) if _SURROGATE_ESCAPE.search(text) else document


def _read_text(path: Path, what: str, max_bytes: int) -> str:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{what} {path} is not a regular file")
        size = info.st_size
        if size > max_bytes:
            raise InputError(
                f"{what} {path} is {size / 2**20:.1f} MiB, over the {max_bytes / 2**20:.0f} MiB "
                "a reader takes: no producer of this file writes that much"
            )
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingFileError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{what} {path} cannot be read: {exc}") from None


def load_json(path: Path, what: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse a JSON file strictly and within bounds; anything else is an :class:`InputError`
    that names the file, says what is wrong and, inside the document, where."""
    text = _read_text(path, what, max_bytes)
    if not text.strip():
        raise InputError(f"{what} {path} is empty")
    try:
        return parse_json(text)
    except ValueError as exc:
        raise InputError(f"{what} {path} {exc}") from None


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


def load_document(path: Path, what: str, kind: str, versions: tuple[int, ...]) -> dict[str, Any]:
    """A JSON object of ``kind`` at one of the format ``versions``; anything else is an
    InputError."""
    data = load_json(path, what)
    if not isinstance(data, dict) or data.get("kind") != kind:
        raise InputError(f"{what} {path} is not an amptrain result of kind {kind!r}")
    version = data.get("format_version")
    if isinstance(version, bool) or version not in versions:
        raise InputError(
            f"{what} {path} has format_version {version!r}; "
            f"this stagegate reads {' and '.join(map(str, versions))}"
        )
    return data


def machine_claim(info: Any) -> MachineClaim:
    """What a file's ``machine_info`` says of its machine (GPU, CPUs, architecture, driver,
    GPU memory and compute capability)."""
    if not isinstance(info, dict):
        return MachineClaim()
    return MachineClaim(
        gpu_name=text(info.get("gpu_name")),
        cpu_count=whole(info.get("cpu_count")),
        arch=text(info.get("machine")),
        driver=text(info.get("driver")),
        gpu_memory_mb=finite(info.get("gpu_memory_mb")),
        gpu_capability=text(info.get("gpu_capability")),
    )
