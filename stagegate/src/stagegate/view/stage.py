"""View models: every string a template prints is built, escaped and formatted here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stagegate.model import (
    Failure,
    Severity,
    StageStatus,
    StageVerdict,
    TestCase,
    TestSuite,
)
from stagegate.view.ab import ab_section
from stagegate.view.charts import line_chart
from stagegate.view.history import history_section
from stagegate.view.parts import (
    MAX_ROWS,
    Chart,
    Context,
    Section,
    Table,
    chart,
    required_text,
    suite_line,
    table,
    tests_line,
)
from stagegate.view.performance import performance_sections
from stagegate.view.text import code, code_block, inline, without_progress


@dataclass(frozen=True)
class StageView:
    name: str
    number: int
    title: str
    banner: str
    summary: Table
    sections: tuple[Section, ...]
    commit: str
    generated_at: str


def _record_pointer(stage: StageVerdict, ctx: Context) -> str:
    return f"{ctx.raw_dir}/{stage.name}.json"


def _issues(stage: StageVerdict, ctx: Context) -> Section:
    counts = ", ".join(f"{stage.count(s)} {s.value}" for s in Severity)
    tables = []
    for severity in Severity:
        items = [f for f in stage.findings if f.severity is severity]
        if not items:
            continue
        rows = [
            (
                severity.value,
                inline(f.title, 200),
                inline(str(f.location)) if f.location else "-",
                inline(f.detail, 300, _record_pointer(stage, ctx)),
                inline(f.fix, 160),
            )
            for f in items
        ]
        tables.append(
            table(
                ("Severity", "Finding", "Location", "Detail", "Fix"),
                rows,
                _record_pointer(stage, ctx),
            )
        )
    paragraphs = (f"Issues: {counts}.",) if stage.findings else ("No findings.",)
    return Section("Issues", paragraphs, tuple(tables))


Part = tuple[list[tuple[str, str]], list[Table]]  # facts for the first table, further tables


def _witness_line(suite: TestSuite) -> str:
    """Whether stagegate's pytest plugin saw the tests raise, apart from pytest's reports."""
    if not suite.witnessed:
        return "claims only: stagegate's pytest plugin left no witness"
    dropped = len(suite.deselected) + len(suite.empty_files)
    kept = f"; {dropped} collected and not run here" if dropped else ""
    return f"witnessed by stagegate's pytest plugin{kept}"


def _suite_part(stage: StageVerdict, pointer: str) -> Part:
    suite = stage.data.suite
    if suite is None:
        return [("Tests", "no JUnit file: the outcome is the command's exit code")], []
    facts = [("Results", inline(tests_line(stage))), ("Tests run", str(suite.executed))]
    if suite.witnessed is not None:
        facts.append(("Outcomes", _witness_line(suite)))
    base = stage.data.base_suite
    if base is not None:
        facts.append(("Base branch", inline(suite_line(base))))
    elif stage.data.base_note:
        facts.append(("Base branch", inline(stage.data.base_note)))
    tables = []
    failed = [c for c in suite.cases if c.outcome in ("failed", "error", "flaky")]
    if failed:
        header = ("Failed or flaky test", "Outcome", "Location", "Message")
        rows = [row for c in failed for row in _failure_rows(c, pointer)]
        tables.append(table(header, rows, pointer))
    skipped = [
        (inline(c.nodeid, 160), inline(c.message or "no reason given"))
        for c in suite.cases
        if c.outcome == "skipped"
    ]
    if skipped:
        tables.append(table(("Skipped or disabled test", "Reason"), skipped, pointer))
    slowest = sorted(suite.cases, key=lambda c: -c.duration_s)[:5]
    if slowest:
        rows = [(inline(c.nodeid, 160), f"{c.duration_s:.2f} s") for c in slowest]
        tables.append(table(("Slowest tests", "Duration"), rows))
    return facts, tables


def _warnings_part(stage: StageVerdict, pointer: str) -> Part:
    if not stage.data.warnings:
        return ([("Warnings captured", "none")] if stage.data.suite else []), []
    rows = [
        (inline(w.category), inline(w.message, 200), inline(str(w.location)), str(w.count))
        for w in stage.data.warnings
    ]
    return [], [table(("Warning", "Message", "Location", "Count"), rows)]


def _coverage_part(stage: StageVerdict, pointer: str) -> Part:
    cov = stage.data.coverage
    if cov is None:
        return [], []
    worst = sorted(cov.files, key=lambda f: f.percent)[:10]
    rows = [
        (inline(f.path), f"{f.percent:.1f}%", inline(_ranges(f.missing_lines), 120)) for f in worst
    ]
    return (
        [("Coverage", f"{cov.percent:.1f}% of lines and branches")],
        [table(("File", "Coverage", "Missed lines"), rows)],
    )


def _lint_part(stage: StageVerdict, pointer: str) -> Part:
    rows = [
        (
            inline(tool),
            str(len(items)),
            *(str(sum(1 for i in items if i.level == lv)) for lv in ("error", "warning", "style")),
        )
        for tool, items in stage.data.lint.items()
    ]
    return [], ([table(("Tool", "Findings", "Errors", "Warnings", "Style"), rows)] if rows else [])


RESULT_PARTS = (_suite_part, _warnings_part, _coverage_part, _lint_part)


def _test_results(stage: StageVerdict, ctx: Context) -> Section:
    record = stage.data.record
    if record is None:
        return Section("Test Execution Results", ("The stage did not run: no record.",))
    facts = [
        ("Command", code(" ".join(record.command), 200)),
        ("Exit code", _exit(stage)),
        ("Duration", f"{record.duration_s:.2f} s"),
        ("Started", inline(record.start)),
    ]
    tables: list[Table] = []
    pointer = record.files.get("junit", "the JUnit file")
    for part in RESULT_PARTS:
        more_facts, more_tables = part(stage, pointer)
        facts += more_facts
        tables += more_tables
    return Section("Test Execution Results", (), (Table(("", ""), tuple(facts)), *tables))


def _failure_rows(case: TestCase, pointer: str) -> list[tuple[str, ...]]:
    """One row per failure of ``case`` (a test may fail several assertions, or several tries)."""
    outcome = case.outcome + (f" ({case.attempts} attempts)" if case.attempts > 1 else "")
    failures = case.failures or (Failure("failure", case.message, case.text, case.location),)
    return [
        (
            inline(case.nodeid, 160) if i == 0 else "″",
            inline(outcome) if i == 0 else "",
            inline(str(x.location)) if x.location else "-",
            inline(x.message or x.text, 300, pointer),
        )
        for i, x in enumerate(failures)
    ]


def _ranges(lines: Sequence[int]) -> str:
    out, start, prev = [], None, None
    for n in sorted(lines):
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else str(start))
    return ", ".join(out) or "-"


def _exit(stage: StageVerdict) -> str:
    r = stage.data.record
    if r is None:
        return "-"
    if r.error:
        return "not started"
    if r.timed_out:
        return "timed out"
    if r.signal is not None:
        return f"killed by signal {r.signal}"
    return str(r.exit_code)


def _curves(stage: StageVerdict) -> tuple[Chart, ...]:
    curves = stage.data.curves
    if curves is None:
        return ()
    return chart(line_chart("Loss per epoch", "epoch", "loss", curves.series))


def _score(stage: StageVerdict) -> Section:
    rows = [(d.severity.value, f"-{d.points}", inline(d.title, 200)) for d in stage.deductions]
    total = sum(d.points for d in stage.deductions)
    return Section(
        "Score Breakdown",
        (f"Score: 100 - {total} = **{stage.score}/100**.",),
        (table(("Severity", "Points", "Finding"), rows),) if rows else (),
    )


def _recommendation(stage: StageVerdict) -> Section:
    if stage.status is StageStatus.PASS:
        text = "**PASS**: every check of this stage met the policy."
    elif stage.status is StageStatus.NOT_VERIFIED:
        text = "**NOT VERIFIED**: nothing here blocks; what was not checked is named above."
    else:
        text = f"**BLOCK**: this stage is {stage.status.value}."
    fixes = [
        f"{i + 1}. {inline(f.title, 160)}: {inline(f.fix, 200)}"
        for i, f in enumerate(x for x in stage.blocking if x.fix)
    ]
    return Section("Recommendation", (text, "\n".join(fixes)) if fixes else (text,))


def _shown(key: str, value: object) -> str:
    """An environment value as a reader takes it in: the accelerators stagegate run saw by
    name, driver and memory, or that it saw none (or could not look)."""
    if key != "accelerators" or not isinstance(value, dict):
        return str(value)
    devices = [d for d in value.get("devices") or [] if isinstance(d, dict)]
    if value.get("error"):
        return f"not observed: {value['error']}"
    if not devices:
        seen = "found no GPU" if value.get("found") else "not on the machine"
        return f"none ({value.get('probe', 'nvidia-smi')} {seen})"
    return "; ".join(
        f"{d.get('name')} (driver {d.get('driver')}, {d.get('memory_mb')} MiB)" for d in devices
    )


def _audit(stage: StageVerdict, ctx: Context) -> Section:
    r = stage.data.record
    changed = [f"- {inline(f, 200)}" for f in ctx.changed_files[:MAX_ROWS]]
    if len(ctx.changed_files) > MAX_ROWS:
        changed.append(f"- … {len(ctx.changed_files) - MAX_ROWS} more")
    paragraphs = (
        [f"Files changed against {inline(ctx.base)}: {len(ctx.changed_files)}.", "\n".join(changed)]
        if changed
        else [f"Files changed: {inline(ctx.base)}."]
    )
    tables, blocks = [], []
    if r is not None:
        env = [(inline(k), inline(_shown(k, v), 160)) for k, v in sorted(r.environment.items())]
        env += [
            ("commit", code(r.commit or "unknown")),
            ("record", code(_record_pointer(stage, ctx))),
        ]
        tables.append(table(("Environment", "Value"), env))
        pointer = _record_pointer(stage, ctx)
        for name, tail in (("Standard output", r.stdout_tail), ("Standard error", r.stderr_tail)):
            if tail:
                shown = code_block(without_progress(tail), 3000, pointer)
                blocks.append(f"{name} (tail):\n\n{shown}")
    return Section(
        "Audit Trail", tuple(p for p in paragraphs if p), tuple(tables), (), tuple(blocks)
    )


def stage_view(stage: StageVerdict, ctx: Context) -> StageView:
    """The view of one stage's report."""
    number_, title = stage.number, f"{inline(stage.title or stage.name, 80)} Verification Report"
    critical = stage.count(Severity.CRITICAL)
    summary = Table(
        ("", ""),
        (
            ("Decision", f"**{stage.status.value}**"),
            ("Score", f"{stage.score}/100"),
            ("Critical issues", str(critical)),
            ("Exit code", _exit(stage)),
            ("Duration", f"{stage.data.record.duration_s:.2f} s" if stage.data.record else "-"),
            ("Required", required_text(stage)),
        ),
    )
    sections = [
        _test_results(stage, ctx),
        _issues(stage, ctx),
        *performance_sections(stage),
    ]
    sections += [s for s in (history_section(stage.history), ab_section(stage)) if s is not None]
    charts = _curves(stage)
    if charts:
        sections.append(Section("Loss Curves", ("From the stage's metrics file.",), (), charts))
    sections += [_recommendation(stage), _score(stage), _audit(stage, ctx)]
    return StageView(
        inline(stage.name, 60),
        number_,
        title,
        inline(stage.note, 400),
        summary,
        tuple(sections),
        code(ctx.commit, 40),
        ctx.generated_at,
    )
