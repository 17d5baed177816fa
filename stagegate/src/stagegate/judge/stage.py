"""One stage judged: every finding its record and files give, its status, and why."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from stagegate.judge.baseline import baseline_findings, compare_to_baseline, pick_baseline
from stagegate.judge.benchmark import benchmark_findings
from stagegate.judge.commits import commit_findings
from stagegate.judge.findings import Findings
from stagegate.judge.outputs import unreadable
from stagegate.judge.results import RESULT_CHECKS
from stagegate.judge.verdict import stage_verdict
from stagegate.model import (
    BaselineComparison,
    Benchmark,
    MetricCheck,
    StageData,
    StageRecord,
    StageStatus,
    StageVerdict,
)
from stagegate.policy import Policy


def _record_findings(f: Findings, record: StageRecord) -> bool:
    """Findings about how the command ended; True when it crashed rather than merely failed."""
    if record.runner_error:
        f.add(
            "stage_failed",
            "stagegate run could not finish the stage's record",
            detail=record.runner_error,
            fix="run the stage again; the files it names could not be read when it ended",
        )
        return True
    if record.error:
        f.add(
            "stage_failed",
            "stage command could not start",
            detail=record.error,
            fix=f"install what the stage runs, or fix its command: {shlex.join(record.command)}",
        )
        return True
    if record.timed_out:
        f.add(
            "stage_failed",
            f"stage timed out after {record.duration_s:.0f} s",
            detail=record.stderr_tail[-600:],
            fix="find the step that hangs or raise the stage's --timeout",
        )
        return True
    if record.signal is not None:
        f.add(
            "stage_failed",
            f"stage command was killed by signal {record.signal}",
            detail=record.stderr_tail[-600:],
            fix="look for memory exhaustion or an external kill",
        )
        return True
    return False


def _no_record(name: str, policy: Policy, data: StageData) -> StageVerdict:
    """A stage without a record: removed since it ran, or never run. Either blocks a required
    stage: ``skippable`` lets a stage that ran without CUDA go unverified, never one that did
    not run (what the CPU can check, the CPU checks)."""
    f = Findings(name, policy)
    how = (
        f"{policy.rerun} runs every stage"
        if policy.rerun
        else f"stagegate run {name} -- COMMAND records it"
    )
    if data.record_gone:
        f.add(
            "stage_failed",
            f"{name}'s record was removed: the stage ran (started {data.record_gone}), and its "
            "record is gone from the raw directory",
            detail="the raw directory's run log names the run; its record was deleted after it",
            fix="find what deletes files under the raw directory between the stage and the "
            f"report, then run the {name} stage again ({how})",
        )
    elif name not in policy.required and policy.skippable.get(name) == "no-cuda":
        note = f"{name} did not run here and is allowed to be skipped: NOT VERIFIED"
        return stage_verdict(name, StageStatus.NOT_VERIFIED, f, data, note=note)
    else:
        skippable = policy.skippable.get(name) == "no-cuda"
        f.add(
            "stage_failed",
            f"{name} has no record: the stage did not run",
            detail="it may go unverified only where it ran without CUDA; what it checks on "
            "a CPU was not checked"
            if skippable
            else "",
            fix=f"run the {name} stage ({how})",
        )
    return stage_verdict(name, StageStatus.MISSING, f, data)


def _performance(
    f: Findings,
    data: StageData,
    policy: Policy,
    baselines: Sequence[Benchmark],
    baseline_problem: str,
) -> tuple[tuple[MetricCheck, ...], BaselineComparison | None]:
    """The benchmark's findings and metric outcomes, and its comparison with a baseline (NOT
    VERIFIED, never a finding, when the baseline given could not be read)."""
    bench = data.benchmark
    if bench is None:
        return (), None
    checks = benchmark_findings(f, bench, policy)
    if not bench.gpu_verified and policy.skippable.get(f.stage) != "no-cuda":
        f.add(
            "stage_failed",
            "GPU performance is required but was not verified",
            detail=f"the benchmark ran preset {bench.preset} on {bench.device}",
            fix="run this stage on a machine with the GPU the preset measures",
        )
    if baseline_problem:
        return checks, BaselineComparison(False, baseline_problem, None, "", unusable=True)
    baseline = pick_baseline(bench, baselines)
    if baseline is None:
        return checks, None
    cmp = compare_to_baseline(bench, baseline, policy.regression_margin_pct)
    baseline_findings(f, cmp)
    return checks, cmp


def _not_verified_note(bench: Benchmark) -> str:
    return (
        f"GPU performance was NOT VERIFIED: no CUDA device here, so the benchmark ran "
        f"its {bench.preset} preset on {bench.device}; speedup, CUDA "
        "memory and MFU were not checked. What the CPU run measured was judged and met "
        "the policy: finite losses, host syncs in the step, autocast dtypes, live tensors "
        "across steps, accuracy parity between precisions"
    )


def judge_stage(
    name: str,
    data: StageData,
    policy: Policy,
    baselines: Sequence[Benchmark] = (),
    baseline_problem: str = "",
    *,
    commit: str | None = None,
) -> StageVerdict:
    """Findings, status and score of one stage; a benchmark is compared with the matching
    one of ``baselines``, or, with ``baseline_problem``, marked as not compared. A record of
    another commit than the run's ``commit`` (when given; "": the run names none) blocks."""
    record = data.record
    if record is None:
        return _no_record(name, policy, data)
    f = Findings(name, policy)
    if commit is not None:
        commit_findings(f, record, commit)
    crashed = _record_findings(f, record)
    errors = unreadable(data)
    for error in data.input_errors:  # missing and refused files: judge/outputs.py
        f.add(
            "stage_failed",
            f"unreadable output: {error}",
            fix="re-run the stage; if the file is still unreadable, its producer changed format "
            "or crashed while writing it",
        )
    for check in RESULT_CHECKS:
        check(f, data, name, policy)
    checks, baseline = _performance(f, data, policy, baselines, baseline_problem)
    if record.exit_code not in (0, None) and not f.blocking:
        f.add(
            "stage_failed",
            f"stage command exited {record.exit_code}",
            detail=(record.stderr_tail or record.stdout_tail)[-600:],
            fix="read the stage's output tail below",
        )
    note = ""
    if crashed or errors:
        status = StageStatus.ERROR
    elif not record.succeeded or f.blocking:
        status = StageStatus.FAIL
    elif data.benchmark is not None and not data.benchmark.gpu_verified:
        status, note = StageStatus.NOT_VERIFIED, _not_verified_note(data.benchmark)
    else:
        status = StageStatus.PASS
    return stage_verdict(name, status, f, data, note=note, checks=checks, baseline=baseline)
