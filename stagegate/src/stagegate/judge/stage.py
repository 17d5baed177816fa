"""One stage judged: every finding its record and files give, its status, and why."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from stagegate.judge.ab import ab_findings
from stagegate.judge.baseline import (
    baseline_findings,
    compare_to_baseline,
    history,
    pick_baseline,
)
from stagegate.judge.benchmark import benchmark_findings
from stagegate.judge.commits import commit_findings
from stagegate.judge.derive import figured
from stagegate.judge.findings import Findings
from stagegate.judge.machine import device_memory_mb, gpu_unused_findings, machine_findings
from stagegate.judge.outputs import unreadable
from stagegate.judge.policy import Policy
from stagegate.judge.results import RESULT_CHECKS
from stagegate.judge.verdict import stage_verdict
from stagegate.kinds import Kind
from stagegate.model import (
    ABCheck,
    ABOutcome,
    BaselineComparison,
    Benchmark,
    MetricCheck,
    StageData,
    StageRecord,
    StageStatus,
    StageVerdict,
)


def _record_findings(f: Findings, record: StageRecord) -> bool:
    """Findings about how the command ended; True when it crashed rather than merely failed."""
    if record.runner_error:
        f.add(
            Kind.STAGE_FAILED,
            "stagegate run could not finish the stage's record",
            detail=record.runner_error,
            fix="run the stage again; the files it names could not be read when it ended",
        )
        return True
    if record.error:
        f.add(
            Kind.STAGE_FAILED,
            "stage command could not start",
            detail=record.error,
            fix=f"install what the stage runs, or fix its command: {shlex.join(record.command)}",
        )
        return True
    if record.timed_out:
        f.add(
            Kind.STAGE_FAILED,
            f"stage timed out after {record.duration_s:.0f} s",
            detail=record.stderr_tail[-600:],
            fix="find the step that hangs or raise the stage's --timeout",
        )
        return True
    if record.signal is not None:
        f.add(
            Kind.STAGE_FAILED,
            f"stage command was killed by signal {record.signal}",
            detail=record.stderr_tail[-600:],
            fix="look for memory exhaustion or an external kill",
        )
        return True
    return False


def _no_record(name: str, policy: Policy, data: StageData) -> StageVerdict:
    """A declared stage without a record: removed since it ran (that blocks, required or
    not), or never run: NOT VERIFIED where the stage is not required, MISSING (it blocks)
    where it is. ``skippable`` lets a stage that ran without CUDA go unverified, never one that
    did not run (what the CPU can check, the CPU checks)."""
    f = Findings(name, policy)
    how = (
        f"{policy.rerun} runs every stage"
        if policy.rerun
        else f"stagegate run {name} -- COMMAND records it"
    )
    if data.record_problem:
        f.add(
            Kind.RECORD_UNUSABLE,
            f"{name}'s record cannot be used",
            detail=data.record_problem,
            fix=f"run the {name} stage again so that stagegate run writes its one record "
            f"({how}); remove any other file that claims to be its record",
        )
        return stage_verdict(name, StageStatus.ERROR, f, data)
    if data.record_gone:
        f.add(
            Kind.STAGE_FAILED,
            f"{name}'s record was removed: the stage ran (started {data.record_gone}), and its "
            "record is gone from the raw directory",
            detail="the raw directory's run log names the run; its record was deleted after it",
            fix="find what deletes files under the raw directory between the stage and the "
            f"report, then run the {name} stage again ({how})",
        )
    elif name not in policy.required:
        marker = policy.stages[name].marker if name in policy.stages else None
        waiting = f" (the tests marked {marker} wait for it: {how})" if marker else ""
        note = f"{name} did not run here; it is not required: NOT VERIFIED{waiting}"
        return stage_verdict(name, StageStatus.NOT_VERIFIED, f, data, note=note)
    else:
        skippable = policy.skippable.get(name) == "no-cuda"
        f.add(
            Kind.STAGE_FAILED,
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
    host: Mapping[str, Any] | None,
) -> tuple[tuple[MetricCheck, ...], BaselineComparison | None, StageData]:
    """The benchmark's findings and metric outcomes, and its comparison with a baseline (NOT
    VERIFIED when the baseline given could not be read or compared: a finding only where the
    stage is required and not skippable); the data with the figures the judge derived from the
    file's raw ones (the views show them)."""
    bench, record = data.benchmark, data.record
    if bench is None or record is None:
        return (), None, data
    bench = figured(bench, policy.benchmark)  # the health checks judge derived figures
    checks = benchmark_findings(f, bench, policy, record, host)
    data = replace(data, benchmark=bench)
    if not bench.gpu_verified and policy.skippable.get(f.stage) != "no-cuda":
        f.add(
            Kind.STAGE_FAILED,
            "GPU performance is required but was not verified",
            detail=f"the benchmark ran preset {bench.preset} on {bench.device}",
            fix="run this stage on a machine with the GPU the preset measures",
        )
    required = f.stage in policy.required and policy.skippable.get(f.stage) != "no-cuda"
    if baseline_problem:
        cmp = BaselineComparison(False, baseline_problem, None, "", unusable=True)
        baseline_findings(f, cmp, required)
        return checks, cmp, data
    baseline = pick_baseline(bench, baselines)
    if baseline is None:
        return checks, None, data
    baseline = figured(baseline, policy.benchmark)
    cmp = compare_to_baseline(bench, baseline, policy.regression_margin_pct)
    baseline_findings(f, cmp, required)
    return checks, cmp, data


def _regression(
    f: Findings, data: StageData, policy: Policy, ab_base: str | None
) -> tuple[ABCheck, ...]:
    """The A/B file's findings and ratios; the regression stage must have one to judge."""
    if data.ab is None:
        named = data.record is not None and "ab" in data.record.files
        if f.stage == "regression" and not named:
            f.add(
                Kind.EVIDENCE_MISSING,
                "the regression stage names no A/B file",
                fix="run it as stagegate run regression --ab=FILE -- "
                "python -m amptrain.benchmark.ab --against BASE --out FILE",
            )
        return ()
    commit = data.record.commit if data.record is not None else None
    env = data.record.environment if data.record is not None else {}
    cores, device_mb = env.get("cpu_count"), device_memory_mb(env)
    return ab_findings(f, data.ab, policy, ab_base, commit, cores, device_mb)


# What the stage's own tool reports when it fails: with one of these blocking, a non-zero exit
# says nothing more. Any other blocking finding (a stale file, a file from another commit) is
# not why the command failed, and the failure is named beside it.
EXPLAINS_EXIT = frozenset(
    {
        Kind.STAGE_FAILED,
        Kind.TEST_FAILED,
        Kind.INTEGRATION_RAISED,
        Kind.LINT_ERROR,
        Kind.BENCHMARK_FAILED,
    }
)


def _exit_explained(f: Findings) -> bool:
    """A blocking finding already says why the command exited non-zero."""
    return any(x.severity.blocks and x.kind in EXPLAINS_EXIT for x in f.items)


def _undecided_only(f: Findings) -> bool:
    """Every blocking finding is an A/B interval too wide to decide: NOT VERIFIED, not FAIL."""
    blocking = [x for x in f.items if x.severity.blocks]
    return bool(blocking) and all(x.kind == "ab_undecided" for x in blocking)


def _undecided_note(checks: tuple[ABCheck, ...]) -> str:
    undecided = ", ".join(
        c.metric.replace("_", " ") for c in checks if c.outcome is ABOutcome.UNDECIDED
    )
    return (
        f"the A/B regression check is NOT VERIFIED: the 95% interval of head/base {undecided} "
        "straddles the policy's limit, so neither a regression nor its absence is shown; "
        "this never passes"
    )


def _skips_cuda(name: str, data: StageData, policy: Policy) -> bool:
    """The stage left what needs CUDA unverified, as its policy lets it where there is none."""
    cpu_run = data.benchmark is not None and not data.benchmark.gpu_verified
    return policy.skippable.get(name) == "no-cuda" and (
        cpu_run or _skipped_without_cuda(name, data, policy)
    )


def _skipped_without_cuda(name: str, data: StageData, policy: Policy) -> bool:
    """A stage the policy lets skip without CUDA whose every test skipped (or none was found)."""
    suite = data.suite
    return policy.skippable.get(name) == "no-cuda" and suite is not None and suite.executed == 0


def _skipped_note(name: str, data: StageData) -> str:
    suite = data.suite
    reasons = sorted({c.message or "no reason given" for c in suite.cases}) if suite else []
    return (
        f"{name} was NOT VERIFIED: every one of its {len(suite.cases) if suite else 0} tests "
        f"skipped ({'; '.join(reasons)[:300] or 'none collected'}); a machine with CUDA runs them"
    )


def _not_verified_note(bench: Benchmark, policy: Policy) -> str:
    spec = policy.benchmark.presets.get(bench.preset)
    measures = spec.measures if spec is not None else ()
    judged = ["finite losses that fall"]
    judged += ["host syncs in the step"] if "syncs" in measures else []
    judged += ["autocast dtypes"] if "autocast" in measures else []
    judged += ["live tensors across steps", "accuracy parity between precisions"]
    return (
        f"GPU performance was NOT VERIFIED: no CUDA device here, so the benchmark ran "
        f"its {bench.preset} preset on {bench.device}; speedup, CUDA "
        "memory and MFU were not checked. What the CPU run measured was judged and met "
        f"the policy: {', '.join(judged)}"
    )


def _run_findings(
    f: Findings,
    data: StageData,
    record: StageRecord,
    commit: str | None,
    now: datetime | None,
    changes: Mapping[str, str] | None = None,
) -> bool:
    """Findings about the run itself: its commit, how its command ended, the machine and the
    clock it observed, its unreadable outputs. True when it crashed rather than failed."""
    if commit is not None:
        commit_findings(f, record, commit, changes)
    crashed = _record_findings(f, record)
    machine_findings(f, data, now, f.policy.benchmark.clock_tolerance_s)
    for error in data.input_errors:  # missing and refused files: judge/outputs.py
        f.add(
            Kind.INPUT_MALFORMED,
            f"unreadable output: {error}",
            fix="re-run the stage; if the file is still unreadable, its producer changed format "
            "or crashed while writing it",
        )
    return crashed


def judge_stage(
    name: str,
    data: StageData,
    policy: Policy,
    baselines: Sequence[Benchmark] = (),
    baseline_problem: str = "",
    host: Mapping[str, Any] | None = None,
    ab_base: str | None = None,
    *,
    commit: str | None = None,
    now: datetime | None = None,
    changes: Mapping[str, str] | None = None,
) -> StageVerdict:
    """Findings, status and score of one stage; a benchmark is compared with the matching
    one of ``baselines``, or, with ``baseline_problem``, marked as not compared, and tied to
    the GPU job's ``host`` facts where given. A record of another commit than the run's
    ``commit`` (when given; "": the run names none) or that began or ended on other
    ``changes`` to its files than the run's (when given) blocks, as does one dated after ``now``
    (the report's clock, when given)."""
    record = data.record
    if record is None:
        return _no_record(name, policy, data)
    f = Findings(name, policy)
    crashed = _run_findings(f, data, record, commit, now, changes)
    errors = unreadable(data)
    for check in RESULT_CHECKS:
        check(f, data, name, policy)
    checks, baseline, data = _performance(f, data, policy, baselines, baseline_problem, host)
    ab = _regression(f, data, policy, ab_base)
    if _skips_cuda(name, data, policy):
        gpu_unused_findings(f, f"{name} skipped what needs CUDA", record)
    if record.exit_code not in (0, None) and not _exit_explained(f):
        f.add(
            Kind.STAGE_FAILED,
            f"stage command exited {record.exit_code}",
            detail=(record.stderr_tail or record.stdout_tail)[-600:],
            fix="read the stage's output tail below",
        )
    note = ""
    if crashed or errors:
        status = StageStatus.ERROR
    elif record.succeeded and _undecided_only(f):
        status, note = StageStatus.NOT_VERIFIED, _undecided_note(ab)
    elif not record.succeeded or f.blocking:
        status = StageStatus.FAIL
    elif data.benchmark is not None and not data.benchmark.gpu_verified:
        status, note = StageStatus.NOT_VERIFIED, _not_verified_note(data.benchmark, policy)
    elif _skipped_without_cuda(name, data, policy):
        status, note = StageStatus.NOT_VERIFIED, _skipped_note(name, data)
    else:
        status = StageStatus.PASS
    past = history(baselines, policy.history_runs) if data.benchmark is not None else ()
    past = tuple(figured(b, policy.benchmark) for b in past)
    return stage_verdict(
        name, status, f, data, note=note, checks=checks, baseline=baseline, ab=ab, history=past
    )
