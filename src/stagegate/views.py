"""View models: every string a template prints is built, escaped and formatted here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from stagegate.charts import bar_chart, line_chart
from stagegate.judge import StageVerdict, Verdict
from stagegate.model import Severity, StageStatus
from stagegate.policy import Policy, check_threshold
from stagegate.text import code, code_block, inline, number

STAGE_TITLES = {
    "static": (1, "Static Verification Report"),
    "execution": (2, "Execution Verification Report"),
    "integration": (3, "Integration Verification Report"),
    "performance": (4, "Performance Verification Report"),
}
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
    title: str
    paragraphs: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    charts: tuple[Chart, ...] = ()
    blocks: tuple[str, ...] = ()  # fenced code blocks, already built


@dataclass(frozen=True)
class Context:
    """Facts about the whole report run."""

    generated_at: str
    commit: str
    base: str  # what "files changed" is measured against, in words
    changed_files: tuple[str, ...]
    raw_dir: str


@dataclass(frozen=True)
class StageView:
    name: str
    number: int
    title: str
    status: str
    banner: str
    summary: Table
    sections: tuple[Section, ...]
    commit: str
    generated_at: str


@dataclass(frozen=True)
class SummaryView:
    decision: str
    score: int
    generated_at: str
    commit: str
    banners: tuple[str, ...]
    stages: Table
    blocking_reasons: tuple[str, ...]
    required_fixes: tuple[str, ...]
    deductions: Table
    links: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], pointer: str = "") -> Table:
    shown = tuple(tuple(r) for r in rows[:MAX_ROWS])
    more = ""
    if len(rows) > MAX_ROWS:
        more = f"{len(rows) - MAX_ROWS} more rows not shown" + (
            f"; see {pointer}" if pointer else ""
        )
    return Table(tuple(header), shown, more)


def _chart(made: tuple[str, str] | None) -> tuple[Chart, ...]:
    return (Chart(*made),) if made else ()


def _tests_line(stage: StageVerdict) -> str:
    suite = stage.data.suite
    if suite is None:
        return "-"
    parts = [f"{suite.count('passed')} passed"]
    for outcome in ("failed", "error", "skipped"):
        if suite.count(outcome):
            parts.append(f"{suite.count(outcome)} {outcome}")
    return ", ".join(parts)


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
            _table(
                ("Severity", "Finding", "Location", "Detail", "Fix"),
                rows,
                _record_pointer(stage, ctx),
            )
        )
    paragraphs = (f"Issues: {counts}.",) if stage.findings else ("No findings.",)
    return Section("Issues", paragraphs, tuple(tables))


def _test_results(stage: StageVerdict, ctx: Context) -> Section:
    record, suite = stage.data.record, stage.data.suite
    if record is None:
        return Section("Test Execution Results", ("The stage did not run: no record.",))
    junit = record.files.get("junit", "the JUnit file")
    facts = [
        ("Command", code(" ".join(record.command), 200)),
        ("Exit code", _exit(stage)),
        ("Duration", f"{record.duration_s:.2f} s"),
        ("Started", inline(record.start)),
    ]
    tables = []
    if suite is not None:
        facts.append(("Results", inline(_tests_line(stage))))
        facts.append(("Tests run", str(len(suite.cases))))
        failed = [c for c in suite.cases if c.outcome in ("failed", "error")]
        if failed:
            tables.append(
                _table(
                    ("Failed test", "Location", "Message"),
                    [
                        (
                            inline(c.nodeid, 160),
                            inline(str(c.location)) if c.location else "-",
                            inline(c.message or c.text, 300, junit),
                        )
                        for c in failed
                    ],
                    junit,
                )
            )
        skipped = [c for c in suite.cases if c.outcome == "skipped"]
        if skipped:
            tables.append(
                _table(
                    ("Skipped test", "Reason"),
                    [
                        (inline(c.nodeid, 160), inline(c.message or "no reason given"))
                        for c in skipped
                    ],
                    junit,
                )
            )
        slowest = sorted(suite.cases, key=lambda c: -c.duration_s)[:5]
        if slowest:
            tables.append(
                _table(
                    ("Slowest tests", "Duration"),
                    [(inline(c.nodeid, 160), f"{c.duration_s:.2f} s") for c in slowest],
                )
            )
    else:
        facts.append(("Tests", "no JUnit file: the outcome is the command's exit code"))
    if stage.data.warnings:
        tables.append(
            _table(
                ("Warning", "Message", "Location", "Count"),
                [
                    (
                        inline(w.category),
                        inline(w.message, 200),
                        inline(str(w.location)),
                        str(w.count),
                    )
                    for w in stage.data.warnings
                ],
            )
        )
    elif suite is not None:
        facts.append(("Warnings captured", "none"))
    cov = stage.data.coverage
    if cov is not None:
        facts.append(("Coverage", f"{cov.percent:.1f}% of lines and branches"))
        worst = sorted(cov.files, key=lambda f: f.percent)[:10]
        tables.append(
            _table(
                ("File", "Coverage", "Missed lines"),
                [
                    (inline(f.path), f"{f.percent:.1f}%", inline(_ranges(f.missing_lines), 120))
                    for f in worst
                ],
            )
        )
    lint = stage.data.lint
    if lint:
        tables.append(
            _table(
                ("Tool", "Findings", "Errors", "Warnings", "Style"),
                [
                    (
                        inline(tool),
                        str(len(items)),
                        *(
                            str(sum(1 for i in items if i.level == lv))
                            for lv in ("error", "warning", "style")
                        ),
                    )
                    for tool, items in lint.items()
                ],
            )
        )
    return Section("Test Execution Results", (), (Table(("", ""), tuple(facts)), *tables))


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


def _required(stage: StageVerdict) -> str:
    if not stage.required:
        return "no"
    return "yes, may be skipped without CUDA" if stage.skippable else "yes"


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


def _performance(stage: StageVerdict, policy: Policy) -> list[Section]:
    bench = stage.data.benchmark
    if bench is None:
        return [
            Section("Performance Metrics", ("Not measured in this stage.",)),
            Section("Memory", ("Not measured in this stage.",)),
            Section("Concurrency", ("Not measured in this stage.",)),
        ]
    judged = bench.gpu_verified
    t = policy.thresholds
    rows = []
    for c in bench.comparisons:
        values = {
            "speedup": (
                c.speedup,
                f"{number(c.speedup)}x (95% CI {number(c.speedup_ci95[0])}"
                f"-{number(c.speedup_ci95[1])})",
            ),
            "peak_memory_reduction_pct": (
                c.peak_memory_reduction_pct,
                number(c.peak_memory_reduction_pct, 1, "%"),
            ),
            "activation_memory_reduction_pct": (
                c.activation_memory_reduction_pct,
                number(c.activation_memory_reduction_pct, 1, "%"),
            ),
            "accuracy_diff": (c.accuracy_diff, number(c.accuracy_diff, 4)),
        }
        for metric, (value, shown) in values.items():
            if not judged or c.baseline != policy.judged_baseline:
                status = "not checked (GPU not verified)" if not judged else "reported"
            else:
                status = "MISS" if check_threshold(t[metric], value) else "PASS"
            rows.append(
                (inline(f"{c.precision} vs {c.baseline}"), metric, shown, str(t[metric]), status)
            )
    per_precision = [
        (
            inline(p.name),
            inline(p.status),
            number(p.step_time_ms),
            number(p.iqr_ms),
            number(p.tokens_per_second, 0),
            number(p.mfu * 100 if p.mfu is not None else None, 1, "%"),
            number(p.val_loss, 4),
            number(p.val_accuracy, 4),
            str(p.overflow_steps) if p.overflow_steps is not None else "-",
        )
        for p in bench.precisions
    ]
    charts = (
        *_chart(
            line_chart(
                "Training loss per timed step",
                "timed step",
                "loss",
                {p.name: p.loss_curve for p in bench.precisions},
            )
        ),
        *_chart(
            bar_chart(
                "Median step time per precision (ms)",
                "ms per step",
                {p.name: p.step_time_ms for p in bench.precisions},
            )
        ),
    )
    setup = (
        f"Preset {code(bench.preset)} on {inline(bench.device)}"
        f" ({inline(bench.gpu_name or 'no GPU')}; torch {inline(bench.torch or '?')}, "
        f"CUDA {inline(bench.cuda or 'none')}, driver {inline(bench.driver or 'none')}). "
        f"Baseline: {inline(str(bench.settings.get('fp32_matmul', 'IEEE fp32')), 200)}."
    )
    metrics = Section(
        "Performance Metrics",
        (setup,),
        (
            _table(("Comparison", "Metric", "Value", "Target", "Status"), rows),
            _table(
                (
                    "Precision",
                    "Status",
                    "ms/step (median)",
                    "IQR ms",
                    "tokens/s",
                    "MFU",
                    "Val loss",
                    "Val accuracy",
                    "Skipped steps",
                ),
                per_precision,
            ),
        ),
        charts,
    )
    memory_rows = [
        (
            inline(p.name),
            number(p.peak_mb, 0),
            number(p.static_mb, 0),
            number(p.activation_mb, 0),
            f"{number(p.memory_growth_mb_per_window, 3)} ({inline(p.memory_source or '-')})",
        )
        for p in bench.precisions
    ]
    memory = Section(
        "Memory",
        (
            "Peak is CUDA memory allocated during a precision's windows; static is parameters, "
            "gradients and optimizer state; activation is peak minus static. Growth is the "
            "least-squares slope of memory in use across windows "
            f"(limit {t['memory_growth_mb_per_window']}).",
        ),
        (
            _table(
                ("Precision", "Peak MB", "Static MB", "Activation MB", "Growth MB/window"),
                memory_rows,
            ),
        ),
    )
    sync_rows = [
        (
            inline(p.name),
            number(p.syncs_per_step, 2) if p.syncs_measured else "not measured (no CUDA)",
            inline(
                ", ".join(f"{s['location']} x{s['count']}" for s in p.sync_locations[:5]) or "-"
            ),
            number(p.data_wait_share * 100 if p.data_wait_share is not None else None, 1, "%"),
            f"{number(p.latency_p50_ms)} / {number(p.latency_p95_ms)}",
        )
        for p in bench.precisions
    ]
    concurrency = Section(
        "Concurrency",
        (
            "Host-device synchronizations inside the training step, counted with CUDA's sync debug "
            "mode in a separate pass; data wait is the share of window time spent waiting for the "
            "next batch; latency is single-sample inference.",
        ),
        (
            _table(
                ("Precision", "Syncs per step", "Where", "Data wait", "Latency p50 / p95 ms"),
                sync_rows,
            ),
        ),
    )
    sections = [metrics, memory, concurrency]
    cmp = stage.data.baseline
    if cmp is not None:
        if not cmp.comparable:
            sections.append(Section("Baseline", (inline(cmp.reason, 300),)))
        else:
            rows = [
                (
                    inline(c.precision),
                    c.metric,
                    number(c.baseline, 2),
                    number(c.current, 2),
                    number(c.change_pct, 1, "%"),
                    number(c.margin_pct, 1, "%"),
                    c.verdict,
                )
                for c in cmp.changes
            ]
            step = {
                f"{c.precision} baseline": c.baseline
                for c in cmp.changes
                if c.metric == "step_time_ms"
            }
            step.update(
                {f"{c.precision} now": c.current for c in cmp.changes if c.metric == "step_time_ms"}
            )
            sections.append(
                Section(
                    "Baseline",
                    (
                        f"Against the baseline from {inline(cmp.baseline_datetime)} "
                        f"(commit {code((cmp.baseline_commit or '?')[:12])}): "
                        f"{inline(cmp.reason)}.",
                    ),
                    (
                        _table(
                            (
                                "Precision",
                                "Metric",
                                "Baseline",
                                "Now",
                                "Change",
                                "Noise margin",
                                "Verdict",
                            ),
                            rows,
                        ),
                    ),
                    _chart(bar_chart("Step time against the baseline (ms)", "ms per step", step)),
                )
            )
    return sections


def _curves(stage: StageVerdict) -> tuple[Chart, ...]:
    curves = stage.data.curves
    if curves is None:
        return ()
    return _chart(line_chart("Loss per epoch", "epoch", "loss", curves.series))


def _score(stage: StageVerdict) -> Section:
    rows = [(d.severity.value, f"-{d.points}", inline(d.title, 200)) for d in stage.deductions]
    total = sum(d.points for d in stage.deductions)
    return Section(
        "Score Breakdown",
        (f"Score: 100 - {total} = **{stage.score}/100**.",),
        (_table(("Severity", "Points", "Finding"), rows),) if rows else (),
    )


def _recommendation(stage: StageVerdict) -> Section:
    if stage.status is StageStatus.PASS:
        text = "**PASS**: every check of this stage met the policy."
    elif stage.status is StageStatus.NOT_VERIFIED:
        text = f"**NOT VERIFIED**: {inline(stage.note, 400)}."
    else:
        text = f"**BLOCK**: this stage is {stage.status.value}."
    fixes = [
        f"{i + 1}. {inline(f.title, 160)}: {inline(f.fix, 200)}"
        for i, f in enumerate(x for x in stage.findings if x.severity.blocks and x.fix)
    ]
    return Section("Recommendation", (text, "\n".join(fixes)) if fixes else (text,))


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
        env = [(inline(k), inline(str(v), 160)) for k, v in sorted(r.environment.items())]
        env += [
            ("commit", code(r.commit or "unknown")),
            ("record", code(_record_pointer(stage, ctx))),
        ]
        tables.append(_table(("Environment", "Value"), env))
        pointer = _record_pointer(stage, ctx)
        if r.stdout_tail:
            blocks.append("Standard output (tail):\n\n" + code_block(r.stdout_tail, 3000, pointer))
        if r.stderr_tail:
            blocks.append("Standard error (tail):\n\n" + code_block(r.stderr_tail, 3000, pointer))
    return Section(
        "Audit Trail", tuple(p for p in paragraphs if p), tuple(tables), (), tuple(blocks)
    )


def stage_view(stage: StageVerdict, policy: Policy, ctx: Context) -> StageView:
    """The view of one stage's report."""
    number_, title = STAGE_TITLES.get(stage.name, (0, f"{stage.name.title()} Verification Report"))
    critical = stage.count(Severity.CRITICAL)
    summary = Table(
        ("", ""),
        (
            ("Decision", f"**{stage.status.value}**"),
            ("Score", f"{stage.score}/100"),
            ("Critical issues", str(critical)),
            ("Exit code", _exit(stage)),
            ("Duration", f"{stage.data.record.duration_s:.2f} s" if stage.data.record else "-"),
            ("Required", _required(stage)),
        ),
    )
    sections = [_test_results(stage, ctx), _issues(stage, ctx), *_performance(stage, policy)]
    charts = _curves(stage)
    if charts:
        sections.append(Section("Loss Curves", ("From the stage's metrics file.",), (), charts))
    sections += [_recommendation(stage), _score(stage), _audit(stage, ctx)]
    return StageView(
        stage.name,
        number_,
        title,
        stage.status.value,
        inline(stage.note, 400),
        summary,
        tuple(sections),
        ctx.commit,
        ctx.generated_at,
    )


def summary_view(verdict: Verdict, ctx: Context) -> SummaryView:
    """The view of the summary across all stages."""
    rows = []
    for s in verdict.stages:
        duration = f"{s.data.record.duration_s:.1f} s" if s.data.record else "-"
        rows.append(
            (
                f"[{s.name}]({s.name}.md)",
                f"**{s.status.value}**",
                _required(s),
                str(s.score),
                *(str(s.count(sev)) for sev in Severity),
                inline(_tests_line(s)),
                duration,
            )
        )
    deductions = [
        (s.name, d.severity.value, f"-{d.points}", inline(d.title, 200))
        for s in verdict.stages
        for d in s.deductions
    ]
    banners = tuple(
        inline(s.note, 400) for s in verdict.stages if s.status is StageStatus.NOT_VERIFIED
    )
    return SummaryView(
        decision=verdict.decision,
        score=verdict.score,
        generated_at=ctx.generated_at,
        commit=ctx.commit,
        banners=banners,
        stages=_table(
            (
                "Stage",
                "Status",
                "Required",
                "Score",
                "Critical",
                "High",
                "Medium",
                "Low",
                "Info",
                "Tests",
                "Duration",
            ),
            rows,
        ),
        blocking_reasons=tuple(inline(r, 300) for r in verdict.blocking_reasons[:MAX_ROWS]),
        required_fixes=tuple(inline(f, 300) for f in verdict.required_fixes[:MAX_ROWS]),
        deductions=_table(("Stage", "Severity", "Points", "Finding"), deductions),
    )
