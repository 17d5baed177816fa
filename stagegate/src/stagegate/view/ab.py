"""The A/B part of a stage report: the head/base ratios the judge recomputed, each with its
interval, the policy's limit and the outcome, and both sides' windows as a chart."""

from __future__ import annotations

from stagegate.model import ABCheck, ABOutcome, ABRun, StageVerdict
from stagegate.view.charts import line_chart
from stagegate.view.parts import Section, chart, table
from stagegate.view.text import code, inline, number

_WORDS = {
    ABOutcome.WITHIN: "PASS: the whole interval lies within the limit",
    ABOutcome.BEYOND: "**REGRESSION**: the whole interval lies beyond the limit",
    ABOutcome.UNDECIDED: "**NOT VERIFIED**: the interval straddles the limit (never a pass)",
}


def _row(c: ABCheck) -> tuple[str, ...]:
    return (
        c.metric.replace("_", " "),
        number(c.ratio, 3, "x"),
        f"{number(c.low, 3)}-{number(c.high, 3)}",
        f"+-{number((c.high - c.low) / 2 / c.ratio * 100, 1, '%')}",
        f"<= {number(c.limit, 3, 'x')}",
        _WORDS[c.outcome],
    )


def _setup(run: ABRun, checks: tuple[ABCheck, ...]) -> str:
    base = code((run.base.sha or "?")[:12])
    head = code((run.head.sha or "?")[:12])
    dirty = " (with uncommitted changes)" if run.head.dirty else ""
    rounds = checks[0].windows if checks else len(run.head.window_s)
    return (
        f"Head {head}{dirty} against base {base}: preset {inline(run.preset or '?')}, "
        f"{inline(run.precision or '?')} on {inline(run.device or '?')}, {rounds} rounds of "
        "one window a side, back to back in alternating order. Each ratio is the median of the "
        "rounds' head/base ratios; its 95% interval is the exact bootstrap of that median, "
        "recomputed by the judge from the raw windows."
    )


def ab_section(stage: StageVerdict) -> Section | None:
    """The A/B Regression section, or None for a stage without an A/B file."""
    run = stage.data.ab
    if run is None:
        return None
    header = ("Metric", "Head/base", "95% interval", "Half-width", "Limit", "Outcome")
    if not stage.ab:
        why = "the A/B file could not be judged: see the findings above"
        return Section("A/B Regression", (_setup(run, ()), inline(why, 300)))
    ms = {
        "base (ms a window)": [w * 1e3 if w else None for w in run.base.window_s],
        "head (ms a window)": [w * 1e3 if w else None for w in run.head.window_s],
    }
    return Section(
        "A/B Regression",
        (_setup(run, stage.ab),),
        (table(header, [_row(c) for c in stage.ab]),),
        chart(line_chart("Window times, base and head", "round", "ms a window", ms)),
    )
