"""Mermaid ``xychart-beta`` blocks: they render on GitHub with no image hosting."""

from __future__ import annotations

import math
from collections.abc import Sequence

from stagegate.view.text import mermaid_label

MAX_POINTS = 100


def _finite_prefix(values: Sequence[float | None]) -> list[float]:
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            break
        out.append(float(v))
    return out


def downsample(values: Sequence[float], limit: int = MAX_POINTS) -> list[float]:
    """At most ``limit`` points: means of consecutive chunks (a curve's shape survives)."""
    if len(values) <= limit:
        return list(values)
    chunk = math.ceil(len(values) / limit)
    return [
        sum(values[i : i + chunk]) / len(values[i : i + chunk])
        for i in range(0, len(values), chunk)
    ]


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def _legend(lines: dict[str, list[float]]) -> str:
    """Names the lines in order, and says which coincide exactly (they draw as one line)."""
    names = list(lines)
    parts = []
    for i, name in enumerate(names):
        same = next((j for j in range(i) if lines[names[j]] == lines[name]), None)
        note = "" if same is None else f" (coincides exactly with {same + 1}; drawn as one line)"
        parts.append(f"{i + 1}. {name}{note}")
    return "Lines, in order: " + ", ".join(parts)


def _x_labels(length: int, total: int) -> str:
    # Whole numbers only: a point is a step or an epoch, never "1.5". A downsampled series is
    # labelled with the first step of each chunk.
    chunk = math.ceil(total / length) if length else 1
    return ", ".join(str(1 + i * chunk) for i in range(length))


def line_chart(
    title: str, x_label: str, y_label: str, series: dict[str, Sequence[float | None]]
) -> tuple[str, str] | None:
    """A line chart and its legend; lines stop at their first non-finite value."""
    prefixes = {name: _finite_prefix(v) for name, v in series.items()}
    lines = {name: downsample(v) for name, v in prefixes.items() if len(v) >= 2}
    if not lines:
        return None
    longest = max(lines, key=lambda k: len(lines[k]))
    x_labels = _x_labels(len(lines[longest]), len(prefixes[longest]))
    body = [
        "xychart-beta",
        f"    title {mermaid_label(title, 60)}",
        f"    x-axis {mermaid_label(x_label)} [{x_labels}]",
        f"    y-axis {mermaid_label(y_label)}",
        *(f"    line [{', '.join(_fmt(v) for v in values)}]" for values in lines.values()),
    ]
    return "\n".join(body), _legend(lines)


def bar_chart(title: str, y_label: str, bars: dict[str, float | None]) -> tuple[str, str] | None:
    """A bar chart of named values (non-finite values are left out); the y-axis starts at
    zero, so a bar's height is proportional to its value."""
    bars = {k: float(v) for k, v in bars.items() if v is not None and math.isfinite(v)}
    if not bars:
        return None
    top = max(max(bars.values()), 0.0) * 1.1 or 1.0
    bottom = min(min(bars.values()), 0.0) * 1.1
    body = [
        "xychart-beta",
        f"    title {mermaid_label(title, 60)}",
        f"    x-axis [{', '.join(mermaid_label(k, 24) for k in bars)}]",
        f"    y-axis {mermaid_label(y_label)} {_fmt(bottom)} --> {_fmt(top)}",
        f"    bar [{', '.join(_fmt(v) for v in bars.values())}]",
    ]
    return "\n".join(body), ""
