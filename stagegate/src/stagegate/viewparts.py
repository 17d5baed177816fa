"""The pieces every view is made of: tables, charts and sections of plain, escaped strings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_ROWS = 50


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    more: str = ""  # a line saying how many rows were left out, and where they are


@dataclass(frozen=True)
class Chart:
    mermaid: str
    legend: str


@dataclass(frozen=True)
class Section:
    title: str  # "" for a section that is one line under the previous heading
    paragraphs: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    charts: tuple[Chart, ...] = ()
    blocks: tuple[str, ...] = ()  # fenced code blocks, already built


def table(header: Sequence[str], rows: Sequence[Sequence[str]], pointer: str = "") -> Table:
    """A table of at most MAX_ROWS rows, saying how many were left out and where they are."""
    shown = tuple(tuple(r) for r in rows[:MAX_ROWS])
    more = ""
    if len(rows) > MAX_ROWS:
        more = f"{len(rows) - MAX_ROWS} more rows not shown" + (
            f"; see {pointer}" if pointer else ""
        )
    return Table(tuple(header), shown, more)


def chart(made: tuple[str, str] | None) -> tuple[Chart, ...]:
    """A chart, or nothing when there was nothing to draw."""
    return (Chart(*made),) if made else ()
