"""Making untrusted text safe for markdown: table cells, code blocks, Mermaid labels, cuts."""

from __future__ import annotations

import math
import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Characters that change how text around them is shown without being seen themselves: bidi
# embeddings, overrides and isolates (a name that reads one way and runs another), directional
# marks, zero-width spaces and joiners, the word joiner and the byte order mark. Each is shown
# by its code point instead, so a cut can leave none of them open.
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
# Half of a UTF-16 pair, alone (from a file name that is not UTF-8): no encoder writes it.
_SURROGATE = re.compile("[\ud800-\udfff]")
# Markdown punctuation that could start emphasis, code, links, strike-through or math, or split
# a cell.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")
# What starts a block at the beginning of a line (a list item's text included): a bullet
# ("- x"), a thematic break ("- - -"), an ordered item ("1. x").
_BLOCK_START = re.compile(r"^(?:[-+](?=\s)|-(?=(?:\s*-){2})|\d{1,9}(?=[.)](?:\s|$)))")
# A zero-width space after these stops GitHub linking them: a mention or team (@name), an
# issue or a heading (#), a bare URL (://) or web address (www.).
_ZWSP = "&#8203;"
_UNLINK = re.compile(r"(@|#|:(?=//)|(?i:\bwww)(?=\.))")


def cut(text: str, limit: int, pointer: str = "") -> str:
    """``text`` shortened to ``limit`` characters, saying where the full text is."""
    if len(text) <= limit:
        return text
    where = f"; full text in {pointer}" if pointer else ""
    return text[:limit].rstrip() + f" … [cut at {limit} of {len(text)} characters{where}]"


def clean(text: str) -> str:
    """Drop ANSI colour codes and control characters (tabs and newlines stay), and show
    invisible direction and width characters, and lone surrogates, by their code points."""
    text = _CONTROL.sub("", _ANSI.sub("", text or ""))
    text = _INVISIBLE.sub(lambda m: f"[U+{ord(m[0]):04X}]", text)
    return _SURROGATE.sub(lambda m: f"[U+{ord(m[0]):04X}]", text)


def inline(text: str, limit: int = 300, pointer: str = "") -> str:
    """Untrusted text for a table cell, a list item or a line: one line, no markdown, no HTML,
    no mention, no link.

    Pipes cannot split a cell, ``<`` cannot open a tag, brackets cannot make a link or an
    image, ``@name`` cannot notify anyone, ``#`` cannot make a heading or an issue link, a
    bare URL is not linked, and a leading ``-``, ``+``, ``=`` or ``1.`` starts no block.
    """
    text = " ".join(clean(text).split())
    text = cut(text, limit, pointer)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    if _BLOCK_START.match(text):  # its marker escaped, as in \- x and 1\. x
        text = re.sub(r"^(\d*)([-+.)])", r"\1\\\2", text)
    return _UNLINK.sub(lambda m: m[1] + _ZWSP, text)


# A test runner's progress line: pytest's "tests/a.py ..F.s  [ 46%]" or "........ [100%]".
_PROGRESS = re.compile(r"^(?:\S+ )?[.sFEXxp]+ *\[ *\d+%\]$", re.MULTILINE)


def without_progress(text: str) -> str:
    """``text`` without a test runner's progress lines, counted where they were."""
    lines = text.splitlines()
    kept = [line for line in lines if not _PROGRESS.match(line.rstrip())]
    dropped = len(lines) - len(kept)
    return "\n".join([f"({dropped} progress lines left out)", *kept]) if dropped else text


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
