"""Count the words of a text."""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["top", "words"]

_WORD = re.compile(r"[a-z0-9']+")


def words(text: str) -> list[str]:
    """The words of ``text``, lower-cased, in order (letters, digits and apostrophes)."""
    return _WORD.findall(text.lower())


def top(text: str, n: int) -> list[tuple[str, int]]:
    """The ``n`` most frequent words of ``text`` with their counts; ties in order of first use."""
    if n < 0:
        raise ValueError(f"n must be 0 or more, not {n}")
    return Counter(words(text)).most_common(n)
