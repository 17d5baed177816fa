"""The performance part of a stage report: one small builder per section, in report order."""

from __future__ import annotations

from collections.abc import Mapping

from stagegate.model import (
    BaselineComparison,
    Benchmark,
    CheckOutcome,
    MetricCheck,
    PrecisionResult,
    StageVerdict,
)
from stagegate.view.charts import bar_chart, line_chart
from stagegate.view.parts import Section, chart, table
from stagegate.view.text import code, inline, number


def _shown(check: MetricCheck) -> str:
    """The judge's figure: recomputed from the raw ones (the speedup's interval too)."""
    if number(check.value) == "-":
        return "-"
    if check.metric == "speedup":
        low, high = check.comparison.speedup_ci95
        return f"{number(check.value)}x (95% CI {number(low)}-{number(high)})"
    if check.metric.endswith("_pct"):
        return number(check.value, 1, "%")
    return number(check.value, 4)


def _status(check: MetricCheck) -> str:
    """The judge's outcome in words; what it could not check says why."""
    if check.outcome is CheckOutcome.NOT_VERIFIED:
        return f"{check.outcome.value} ({inline(check.why)})"
    return check.outcome.value


def _comparison_rows(checks: tuple[MetricCheck, ...]) -> list[tuple[str, ...]]:
    return [
        (
            inline(f"{c.comparison.precision} vs {c.comparison.baseline}"),
            c.metric,
            _shown(c),
            c.target,  # the policy's own text: an operator, a number, a unit
            _status(c),
        )
        for c in checks
    ]


def _mfu(p: PrecisionResult) -> str:
    """The share of the GPU's peak in the precision's dtype; fp8's of the bf16 peak beside it."""
    share = number(p.mfu * 100 if p.mfu is not None else None, 1, "%")
    if p.mfu_bf16 is None:
        return share
    return f"{share} ({number(p.mfu_bf16 * 100, 1, '%')} of bf16 peak)"


def _precision_row(p: PrecisionResult) -> tuple[str, ...]:
    return (
        inline(p.name),
        inline(p.status),
        number(p.step_time_ms),
        number(p.iqr_ms),
        number(p.tokens_per_second, 0),
        _mfu(p),
        number(p.val_loss, 4),
        number(p.val_accuracy, 4),
        str(p.overflow_steps) if p.overflow_steps is not None else "-",
    )


def _setup_line(bench: Benchmark) -> str:
    return (
        f"Preset {code(bench.preset)} on {inline(bench.device)}"
        f" ({inline(bench.gpu_name or 'no GPU')}; torch {inline(bench.torch or '?')}, "
        f"CUDA {inline(bench.cuda or 'none')}, driver {inline(bench.driver or 'none')}). "
        f"Baseline: {inline(str(bench.settings.get('fp32_matmul', 'IEEE fp32')), 200)}."
    )


def metrics_section(bench: Benchmark, checks: tuple[MetricCheck, ...]) -> Section:
    """The judge's outcome per comparison metric, figures per precision, the loss curves and
    step times."""
    header = ("Precision", "Status", "ms/step (median)", "IQR ms", "tokens/s", "MFU")
    header += ("Val loss", "Val accuracy", "Skipped steps")
    charts = (
        *chart(
            line_chart(
                "Training loss per timed step",
                "timed step",
                "loss",
                {p.name: p.loss_curve for p in bench.precisions},
            )
        ),
        *chart(
            bar_chart(
                "Median step time per precision (ms)",
                "ms per step",
                {p.name: p.step_time_ms for p in bench.precisions},
            )
        ),
    )
    return Section(
        "Performance Metrics",
        (_setup_line(bench),),
        (
            table(
                ("Comparison", "Metric", "Value", "Target", "Status"),
                _comparison_rows(checks),
            ),
            table(header, [_precision_row(p) for p in bench.precisions]),
        ),
        charts,
    )


def _memory_row(p: PrecisionResult) -> tuple[str, ...]:
    graph = str(p.live_graph_tensors) if p.live_graph_tensors is not None else "-"
    return (
        inline(p.name),
        number(p.peak_mb, 0),
        number(p.static_mb, 0),
        number(p.activation_mb, 0),
        f"{number(p.memory_growth_mb_per_window, 3)} ({inline(p.memory_source or '-')})",
        number(p.live_growth_pct_per_window, 3, "%"),
        graph,
    )


MEMORY_HEADER = (
    "Precision",
    "Peak MB",
    "Static MB",
    "Activation MB",
    "Growth MB/window",
    "Live tensor growth/window",
    "Graph-attached tensors",
)


MEMORY_LIMITS = (
    "memory_growth_mb_per_window",
    "live_tensor_growth_pct_per_window",
    "live_graph_tensors",
)


def memory_section(bench: Benchmark, limits: Mapping[str, str]) -> Section:
    """Peak, static and activation memory, and growth across windows, per precision, with the
    limits the judge held them to."""
    t = {k: limits.get(k, "-") for k in MEMORY_LIMITS}
    return Section(
        "Memory",
        (
            "Peak is CUDA memory allocated during a precision's windows; static is parameters, "
            "gradients and optimizer state; activation is peak minus static. Growth is the "
            "least-squares slope of memory in use across windows "
            f"(limit {t['memory_growth_mb_per_window']}). Live tensors are those Python holds "
            "after each window, on any device: their storage's growth per window relative to "
            f"the start (limit {t['live_tensor_growth_pct_per_window']}), and the most still "
            f"attached to an autograd graph (limit {t['live_graph_tensors']}: each keeps a graph "
            "alive).",
        ),
        (table(MEMORY_HEADER, [_memory_row(p) for p in bench.precisions]),),
    )


SYNC_HEADER = (
    "Precision",
    "Syncs per step",
    "Where",
    "Matmul dtypes",
    "Data wait",
    "Latency p50 / p95 ms",
)


def _sync_row(p: PrecisionResult) -> tuple[str, ...]:
    where = ", ".join(f"{s['location']} x{s['count']}" for s in p.sync_locations[:5])
    how = {"cuda": "CUDA sync debug mode", "dispatch": "dispatched host reads"}
    dtypes = ", ".join(f"{d} x{n}" for d, n in sorted(p.matmul_dtypes.items())) or "-"
    return (
        inline(p.name),
        f"{number(p.syncs_per_step, 2)} ({how.get(p.sync_method, inline(p.sync_method))})"
        if p.syncs_measured
        else "not measured",
        inline(where or "-"),
        inline(f"{dtypes} (expected {p.matmul_dtype_expected or '-'})"),
        number(p.data_wait_share * 100 if p.data_wait_share is not None else None, 1, "%"),
        f"{number(p.latency_p50_ms)} / {number(p.latency_p95_ms)}",
    )


def concurrency_section(bench: Benchmark) -> Section:
    """Host-device syncs in the step, time waiting for data, inference latency."""
    return Section(
        "Concurrency",
        (
            "Host-device synchronizations inside the training step, counted in a separate pass "
            "with CUDA's sync debug mode on a GPU, or elsewhere from the operators the step "
            "dispatches that read a tensor's value on the host (.item(), bool(), .tolist(), "
            "nonzero, ...); matmul dtypes are those one training step computed in; data wait is "
            "the share of window time spent waiting for the next batch; latency is "
            "single-sample inference.",
        ),
        (
            table(
                SYNC_HEADER,
                [_sync_row(p) for p in bench.precisions],
            ),
        ),
    )


def baseline_section(cmp: BaselineComparison) -> Section:
    """Each precision's figures against the committed baseline, within the noise margin."""
    if not cmp.comparable:
        return Section("Baseline", (inline(cmp.reason, 300),))
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
    steps = [c for c in cmp.changes if c.metric == "step_time_ms"]
    bars = {f"{c.precision} baseline": c.baseline for c in steps}
    bars.update({f"{c.precision} now": c.current for c in steps})
    header = ("Precision", "Metric", "Baseline", "Now", "Change", "Noise margin", "Verdict")
    return Section(
        "Baseline",
        (
            f"Against the baseline from {inline(cmp.baseline_datetime)} "
            f"(commit {code((cmp.baseline_commit or '?')[:12])}): {inline(cmp.reason)}.",
        ),
        (table(header, rows),),
        chart(bar_chart("Step time against the baseline (ms)", "ms per step", bars)),
    )


def performance_sections(stage: StageVerdict) -> list[Section]:
    """Performance Metrics, Memory, Concurrency and Baseline; none where nothing was
    measured."""
    bench = stage.data.benchmark
    if bench is None:
        return []  # a stage that must measure and did not has an output_missing finding
    sections = [
        metrics_section(bench, stage.checks),
        memory_section(bench, stage.limits),
        concurrency_section(bench),
    ]
    if stage.baseline is not None:
        sections.append(baseline_section(stage.baseline))
    return sections
