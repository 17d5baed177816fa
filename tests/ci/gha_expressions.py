"""GitHub Actions' expression language (``${{ }}`` and ``if:``), evaluated as GitHub documents it.

Literals (null, booleans, numbers, 'strings' with '' for a quote), property access (``a.b``,
``a['b']``), ``!``, comparisons (``< <= > >= == !=``, strings compared case-insensitively,
mixed types compared as numbers), ``&&`` and ``||`` (which return one of their operands), and
the functions contains, startsWith, endsWith, format, join, toJSON, fromJSON, and the status
functions success, always, failure and cancelled.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

_TOKENS = re.compile(
    r"\s*(?:(?P<num>0x[0-9a-fA-F]+|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    r"|(?P<str>'(?:[^']|'')*')"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|<|>|!|\(|\)|\[|\]|\.|,)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKENS.match(text, pos)
        if not m or m.end() == pos:
            raise SyntaxError(f"cannot read {text[pos : pos + 20]!r} in {text!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _number(value: Any) -> float:
    """GitHub's conversion to a number for comparisons."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(int(value, 16)) if value.lower().startswith("0x") else float(value or 0)
        except ValueError:
            return math.nan
    return math.nan


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if type(a) is type(b) or (isinstance(a, int | float) and isinstance(b, int | float)):
        return a == b if not isinstance(a, dict | list) else a is b
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    return _number(a) == _number(b)


def truthy(value: Any) -> bool:
    """GitHub's truthiness: null, false, 0, NaN and '' are false."""
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in (None, False, 0, "")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value)


def _contains(haystack: Any, needle: Any) -> bool:
    if isinstance(haystack, list):
        return any(_equal(x, needle) for x in haystack)
    return _text(needle).lower() in _text(haystack).lower()


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "contains": _contains,
    "startswith": lambda a, b: _text(a).lower().startswith(_text(b).lower()),
    "endswith": lambda a, b: _text(a).lower().endswith(_text(b).lower()),
    "format": lambda f, *args: (
        re.sub(r"\{(\d+)\}", lambda m: _text(args[int(m.group(1))]), _text(f))
        .replace("{{", "{")
        .replace("}}", "}")
    ),
    "join": lambda items, sep=",": (
        _text(sep).join(_text(x) for x in items) if isinstance(items, list) else _text(items)
    ),
    "tojson": lambda v: json.dumps(v, indent=2),
    "fromjson": lambda s: json.loads(_text(s)),
}


class _Parser:
    def __init__(self, text: str, context: Mapping[str, Any], status: Mapping[str, bool]):
        self.tokens, self.pos = _tokens(text), 0
        self.context, self.status = context, status

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise SyntaxError("unexpected end of expression")
        token = self.tokens[self.pos]
        if expected is not None and token[1] != expected:
            raise SyntaxError(f"expected {expected!r}, found {token[1]!r}")
        self.pos += 1
        return token

    def parse(self) -> Any:
        value = self.either()
        if self.pos != len(self.tokens):
            raise SyntaxError(f"unexpected {self.peek()!r}")
        return value

    def either(self) -> Any:
        left = self.both()
        while self.peek() == "||":
            self.take()
            right = self.both()
            left = left if truthy(left) else right
        return left

    def both(self) -> Any:
        left = self.compare()
        while self.peek() == "&&":
            self.take()
            right = self.compare()
            left = right if truthy(left) else left
        return left

    def compare(self) -> Any:
        left = self.unary()
        while self.peek() in ("==", "!=", "<", "<=", ">", ">="):
            op = self.take()[1]
            right = self.unary()
            if op in ("==", "!="):
                left = _equal(left, right) == (op == "==")
            elif isinstance(left, str) and isinstance(right, str):
                a, b = left.lower(), right.lower()
                left = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
            else:
                a, b = _number(left), _number(right)
                left = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return left

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        return self.postfix(self.primary())

    def postfix(self, value: Any) -> Any:
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
            else:
                key = self.either()
                self.take("]")
            value = self._index(value, key)
        return value

    @staticmethod
    def _index(value: Any, key: Any) -> Any:
        if isinstance(value, dict):
            lowered = {str(k).lower(): v for k, v in value.items()}
            return lowered.get(_text(key).lower())
        if isinstance(value, list) and isinstance(key, int | float) and 0 <= key < len(value):
            return value[int(key)]
        return None

    def primary(self) -> Any:
        kind, text = self.take()
        if text == "(":
            value = self.either()
            self.take(")")
            return value
        if kind == "num":
            return float(int(text, 16)) if text.lower().startswith("0x") else float(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind != "name":
            raise SyntaxError(f"unexpected {text!r}")
        lowered = text.lower()
        if lowered in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[lowered]
        if self.peek() == "(":
            return self.call(lowered)
        return self._index(self.context, text)

    def call(self, name: str) -> Any:
        self.take("(")
        args = []
        while self.peek() != ")":
            args.append(self.either())
            if self.peek() == ",":
                self.take()
        self.take(")")
        if name in ("success", "always", "failure", "cancelled"):
            return self.status[name]
        if name not in FUNCTIONS:
            raise SyntaxError(f"unknown function {name}()")
        return FUNCTIONS[name](*args)


def evaluate(
    expression: str, context: Mapping[str, Any], status: Mapping[str, bool] | None = None
) -> Any:
    """The value of ``expression`` (with or without ``${{ }}``) in ``context``.

    ``status`` gives the job-status functions: by default the needed jobs all succeeded.
    """
    text = expression.strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    status = status or {"success": True, "always": True, "failure": False, "cancelled": False}
    return _Parser(text, context, status).parse()


def job_runs(condition: str | bool | None, context: Mapping[str, Any], needs_ok: bool) -> bool:
    """Whether a job with ``if: condition`` runs, given whether every job it needs succeeded.

    With no status function in it, GitHub evaluates ``success() && (condition)``.
    """
    status = {"success": needs_ok, "always": True, "failure": not needs_ok, "cancelled": False}
    text = "success()" if condition in (None, "") else str(condition)
    if not re.search(r"\b(success|always|failure|cancelled)\s*\(", text):
        text = f"success() && ({text.strip().removeprefix('${{').removesuffix('}}')})"
    return truthy(evaluate(text, context, status))
