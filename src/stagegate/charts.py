"""Mermaid ``xychart-beta`` blocks: they render on GitHub with no image hosting."""

from __future__ import annotations

import math
from collections.abc import Sequence

from stagegate.text import mermaid_label

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


def line_chart(
    title: str, x_label: str, y_label: str, series: dict[str, Sequence[float | None]]
) -> tuple[str, str] | None:
    """A line chart and its legend; lines stop at their first non-finite value."""
    lines = {name: downsample(_finite_prefix(v)) for name, v in series.items()}
    lines = {k: v for k, v in lines.items() if len(v) >= 2}
    if not lines:
        return None
    n = max(len(v) for v in lines.values())
    body = [
        "xychart-beta",
        f"    title {mermaid_label(title, 60)}",
        f"    x-axis {mermaid_label(x_label)} 1 --> {n}",
        f"    y-axis {mermaid_label(y_label)}",
        *(f"    line [{', '.join(_fmt(v) for v in values)}]" for values in lines.values()),
    ]
    legend = "Lines, in order: " + ", ".join(f"{i + 1}. {name}" for i, name in enumerate(lines))
    return "\n".join(body), legend


def bar_chart(title: str, y_label: str, bars: dict[str, float | None]) -> tuple[str, str] | None:
    """A bar chart of named values (non-finite values are left out)."""
    bars = {k: float(v) for k, v in bars.items() if v is not None and math.isfinite(v)}
    if not bars:
        return None
    body = [
        "xychart-beta",
        f"    title {mermaid_label(title, 60)}",
        f"    x-axis [{', '.join(mermaid_label(k, 24) for k in bars)}]",
        f"    y-axis {mermaid_label(y_label)}",
        f"    bar [{', '.join(_fmt(v) for v in bars.values())}]",
    ]
    return "\n".join(body), ""
