"""The pieces every view is made of: tables, charts and sections of plain, escaped strings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stagegate.model import StageVerdict, TestSuite
from stagegate.view.text import inline

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


@dataclass(frozen=True)
class Context:
    """Facts about the whole report run."""

    generated_at: str
    commit: str
    base: str  # what "files changed" is measured against, in words
    changed_files: tuple[str, ...]
    raw_dir: str
    run_url: str = ""  # on GitHub: the run whose artifact holds the stage reports
    gate_files: tuple[str, ...] = ()  # the changed files that define the gate itself
    # Whether a link to a stage's report (``static.md``) resolves where this is read: beside the
    # reports, yes; in a pull-request comment, no (the stage names are then plain text).
    reports_beside: bool = True


def report_link(name: str, ctx: Context) -> str:
    """A link to a stage's report that works where the summary is read: the file beside it,
    or on GitHub (job summary, pull-request comment) the run that holds the reports artifact;
    the name alone where neither resolves (a comment without the run's address)."""
    shown = inline(name, 60)
    if ctx.run_url:
        return f"[{shown}]({ctx.run_url})"
    return f"[{shown}]({name}.md)" if ctx.reports_beside else shown


def tests_line(stage: StageVerdict) -> str:
    """The stage's test counts in words, or ``-`` when it left no test results."""
    return "-" if stage.data.suite is None else suite_line(stage.data.suite)


def suite_line(suite: TestSuite) -> str:
    """``3 passed, 1 failed, 2 skipped``: every outcome that occurs."""
    parts = [f"{suite.count('passed')} passed"]
    for outcome in ("flaky", "failed", "error", "skipped"):
        if suite.count(outcome):
            parts.append(f"{suite.count(outcome)} {outcome}")
    return ", ".join(parts)


def required_text(stage: StageVerdict) -> str:
    """Whether the stage is required, in words."""
    if not stage.required:
        return "no"
    return "yes, may be skipped without CUDA" if stage.skippable else "yes"
