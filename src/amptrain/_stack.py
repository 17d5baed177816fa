"""Warnings that point at the caller's line, not at amptrain's own."""

from __future__ import annotations

import sys


def outside_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` called by this function's caller that names
    the first frame outside amptrain (the user's call, however deep the library's stack)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("amptrain"):
        frame, level = frame.f_back, level + 1
    return level
