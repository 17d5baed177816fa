"""Making untrusted text safe for markdown: table cells, code blocks, Mermaid labels, cuts."""

from __future__ import annotations

import math
import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Markdown punctuation that could start emphasis, code, links or strike-through, or split a cell.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def cut(text: str, limit: int, pointer: str = "") -> str:
    """``text`` shortened to ``limit`` characters, saying where the full text is."""
    if len(text) <= limit:
        return text
    where = f"; full text in {pointer}" if pointer else ""
    return text[:limit].rstrip() + f" … [cut at {limit} of {len(text)} characters{where}]"


def clean(text: str) -> str:
    """Drop ANSI colour codes and control characters (tabs and newlines stay)."""
    return _CONTROL.sub("", _ANSI.sub("", text or ""))


def inline(text: str, limit: int = 300, pointer: str = "") -> str:
    """Untrusted text for a table cell or a line: one line, no markdown, no HTML, no mentions.

    Pipes cannot split a cell, ``<`` cannot open a tag, ``@name`` cannot notify anyone,
    and brackets cannot make a link.
    """
    text = " ".join(clean(text).split())
    text = cut(text, limit, pointer)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return text.replace("@", "@&#8203;")  # a zero-width space after @ stops the mention


def code_block(text: str, limit: int = 4000, pointer: str = "", lang: str = "text") -> str:
    """A fenced block whose fence is longer than any backtick run inside (it cannot be closed)."""
    body = cut(clean(text).rstrip("\n"), limit, pointer) if text else "(empty)"
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{body}\n{fence}"


def code(text: str, limit: int = 120) -> str:
    """Inline code for a short value, such as a command or a path."""
    body = " ".join(clean(text).split())
    body = cut(body, limit).replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{ticks}{pad}{body}{pad}{ticks}"


def mermaid_label(text: str, limit: int = 40) -> str:
    """A quoted Mermaid string: no quotes, brackets or newlines inside."""
    safe = re.sub(r"[\"\[\]{}<>;`]", "", " ".join(clean(text).split()))
    return '"' + cut(safe, limit).replace("…", "...") + '"'


def number(value: float | None, decimals: int = 2, suffix: str = "") -> str:
    """A number for display; ``-`` when it was not measured."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{decimals}f}{suffix}"
