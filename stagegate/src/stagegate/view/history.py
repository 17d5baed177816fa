"""The GPU figures of the trusted baselines over time: step time, MFU and peak memory of each
precision, one point a run, oldest first, as mermaid line charts. History shows drift across
torch, driver and image upgrades; it never decides anything (the A/B stage does)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stagegate.model import Benchmark, PrecisionResult
from stagegate.view.charts import line_chart
from stagegate.view.parts import Chart, Section, chart, table
from stagegate.view.text import code, inline

FIGURES: tuple[tuple[str, str, Callable[[PrecisionResult], float | None]], ...] = (
    ("Step time", "ms per step", lambda p: p.step_time_ms),
    ("MFU", "% of peak", lambda p: p.mfu * 100 if p.mfu is not None else None),
    ("Peak memory", "MB", lambda p: p.peak_mb),
)


def _series(runs: Sequence[Benchmark], figure: Callable[[PrecisionResult], float | None]) -> dict:
    names = list(dict.fromkeys(p.name for run in runs for p in run.precisions))
    series: dict[str, list[float | None]] = {}
    for name in names:
        values = []
        for run in runs:
            p = run.precision(name)
            values.append(figure(p) if p is not None and p.status == "ok" else None)
        series[name] = values
    return series


def _row(i: int, run: Benchmark) -> tuple[str, ...]:
    return (
        str(i + 1),
        inline(run.datetime or "?"),
        code((run.commit or "?")[:12]),
        inline(run.gpu_name or "?"),
        inline(run.torch or "?"),
        inline(run.driver or "?"),
    )


def history_section(runs: Sequence[Benchmark]) -> Section | None:
    """The History section, or None with no trusted GPU baseline to draw."""
    if not runs:
        return None
    charts: tuple[Chart, ...] = ()
    for title, unit, figure in FIGURES:
        charts += chart(line_chart(f"{title} of the baselines", "run", unit, _series(runs, figure)))
    header = ("Run", "Measured", "Commit", "GPU", "torch", "Driver")
    text = (
        f"The last {len(runs)} trusted baselines (GPU runs of the default branch), oldest first; "
        "a line stops at a run that did not measure it. Shown for drift across upgrades: "
        "the regression check is the A/B stage."
    )
    if len(runs) < 2:
        text += " One run draws no line: its figures are in the Baseline section."
    return Section(
        "History", (text,), (table(header, [_row(i, r) for i, r in enumerate(runs)]),), charts
    )
