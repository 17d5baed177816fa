"""History: the trusted GPU baselines given to the report, oldest first and at most the
policy's ``history_runs``, drawn as step time, MFU and peak memory charts; a CPU run is no GPU
history, and history never changes a verdict."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from stagegate.judge import decide, judge_stage
from stagegate.judge.baseline import history
from stagegate.judge.derive import figured
from stagegate.judge.policy import Policy
from stagegate.model import Benchmark, Decision
from stagegate.view.history import history_section

from ..builders import TOKENS_PER_WINDOW, bench, cpu_bench, performance


def run(day: int, step_ms: float, commit: str) -> Benchmark:
    b = bench(step_ms={"bf16-mixed": step_ms})
    return replace(b, datetime=f"2026-01-{day:02d}T00:00:00Z", commit=commit)


RUNS = [run(3, 90.0, "c3"), run(1, 100.0, "c1"), run(2, 95.0, "c2")]


def test_the_last_runs_on_a_gpu_oldest_first() -> None:
    cpu = replace(cpu_bench(), datetime="2026-01-09T00:00:00Z")
    picked = history([*RUNS, cpu], 2)
    assert [b.commit for b in picked] == ["c2", "c3"]
    assert history(RUNS, 0) == () and history([cpu], 5) == ()


def test_a_baseline_without_its_commit_is_no_history() -> None:
    assert history([replace(RUNS[0], commit=None)], 5) == ()


def test_the_charts_draw_each_figure_of_each_precision_in_time_order() -> None:
    """The figures are the judge's, derived from each baseline's windows."""
    policy = Policy().benchmark
    section = history_section(tuple(figured(b, policy) for b in history(RUNS, 20)))
    assert section is not None and len(section.charts) == 3
    steps, mfu, memory = (c.mermaid for c in section.charts)
    assert "line [100, 95, 90]" in steps  # bf16-mixed, oldest first
    flops = policy.presets["gpu"].flops_per_token or 0
    expected = [TOKENS_PER_WINDOW / (ms / 100) * flops / 1e12 / 989.5 * 100 for ms in (100, 95, 90)]
    shown = [float(x) for x in re.findall(r"line \[([^\]]+)\]", mfu)[-1].split(", ")]
    assert shown == pytest.approx(expected, rel=1e-5) and "Peak memory" in memory
    assert [row[2] for row in section.tables[0].rows] == ["`c1`", "`c2`", "`c3`"]


def test_no_history_no_section_and_history_never_decides() -> None:
    assert history_section(()) is None
    policy = Policy(required=("performance",))
    same = run(4, 100.0, "c4")  # the newest baseline, which the comparison picks
    drawn = judge_stage("performance", performance(bench()), policy, [same, *RUNS])
    hidden = judge_stage(
        "performance", performance(bench()), replace(policy, history_runs=0), [same, *RUNS]
    )
    assert len(drawn.history) == 4 and hidden.history == ()
    assert decide([drawn]).decision is decide([hidden]).decision is Decision.PASS
