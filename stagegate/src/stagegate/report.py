"""``stagegate report``: read records, collect, judge, render, write: a pipeline of small steps."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stagegate.collect import collect_stage, find_records, read_baselines, read_run_log
from stagegate.collect.changes import changed_files
from stagegate.collect.jsonfile import load_json
from stagegate.collect.records import UNATTRIBUTED, RecordScan
from stagegate.errors import InputError, InternalError
from stagegate.io import write_atomic
from stagegate.judge import decide, judge_stage
from stagegate.judge.commits import run_commit
from stagegate.judge.policy import Policy, load_policy
from stagegate.model import (
    Benchmark,
    StageData,
    Verdict,
    stage_name_problem,
)
from stagegate.view.github import COMMENT_MARKER, annotations, append_step_summary, comment_body
from stagegate.view.parts import Context
from stagegate.view.render import render_stage, render_summary, verdict_json
from stagegate.view.stage import stage_view
from stagegate.view.summary import summary_view

__all__ = ["COMMENT_MARKER", "ReportOptions", "build_report", "run_report"]


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    raw_dir: Path
    out_dir: Path
    require: tuple[str, ...] = ()
    only: tuple[str, ...] = ()  # judge just these stages (another job judges the rest)
    baseline: Path | None = None
    github: bool = False
    pyproject: Path | None = Path("pyproject.toml")
    base_ref: str | None = None
    changed_files: Path | None = None  # the change's paths, one a line (in place of a git diff)
    base_raw: Path | None = None  # the base branch's raw results: its skipped tests
    host: Path | None = None  # the GPU job's host.json: the GPU the benchmark must name
    ab_base: str | None = None  # the commit an A/B file must have measured as its base


def _run_url(options: ReportOptions, env: Mapping[str, str]) -> str:
    """The GitHub Actions run page (where the reports artifact is), in --github mode."""
    keys = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    if not options.github or not all(env.get(k) for k in keys):
        return ""
    server, repo, run = (env[k] for k in keys)
    return f"{server}/{repo}/actions/runs/{run}"


def _records(options: ReportOptions, policy: Policy) -> RecordScan:
    scan = find_records(options.raw_dir, {*policy.stages, *policy.required})
    if not scan.records and not scan.problems:
        how = policy.rerun or "stagegate run STAGE -- COMMAND, for each stage"
        raise InputError(f"no stage records in {options.raw_dir}: run the stages first ({how})")
    return scan


def _stage_names(scan: RecordScan, policy: Policy, only: bool) -> list[str]:
    """The stages to judge: every declared one (in the declared order), then any other that
    left a record, then the raw folder's unattributed records (whatever is judged)."""
    ran = {*scan.records, *scan.problems}
    return [
        *(s for s in policy.stages if policy.judges(s)),
        *(s for s in sorted(ran) if s not in policy.stages and not only and s != UNATTRIBUTED),
        *([UNATTRIBUTED] if UNATTRIBUTED in scan.problems else []),
    ]


def _collect(scan: RecordScan, name: str, raw_dir: Path, ran: str | None) -> StageData:
    record = scan.records.get(name)
    if record is None:
        problem = scan.problems.get(name, "")
        return StageData(record=None, record_gone=ran or "", record_problem=problem)
    return collect_stage(record, raw_dir)


def _baselines(path: Path | None) -> tuple[list[Benchmark], str]:
    """The baselines given, or why they cannot be used (the comparison is then NOT VERIFIED)."""
    if path is None:
        return [], ""
    try:
        return read_baselines(path), ""
    except InputError as exc:
        return [], f"the baseline given cannot be used: {exc}"


def _host(path: Path | None) -> dict[str, Any] | None:
    """The GPU job's host facts (``--host``); one that cannot be read stops the report."""
    if path is None:
        return None
    host = load_json(path, "host facts (--host)")
    if not isinstance(host, dict):
        raise InputError(
            f"host facts (--host) {path} is not a JSON object: give gpu_stage's host.json"
        )
    return host


def _base_results(base_raw: Path | None) -> tuple[dict[str, StageData], str]:
    """The base branch's collected stages (``--base-raw``), or why there are none."""
    if base_raw is None:
        return {}, "not compared: no base branch results given (--base-raw)"
    try:
        records = find_records(base_raw).records
    except InputError as exc:
        return {}, f"not compared: the base branch's results cannot be read: {exc}"
    return {name: collect_stage(rec, base_raw) for name, rec in records.items()}, ""


def _with_base(data: StageData, base: StageData | None, note: str) -> StageData:
    if base is not None and base.suite is not None:
        return replace(data, base_suite=base.suite)
    return replace(data, base_note=note or "not compared: the base branch left no test results")


def _judge(options: ReportOptions, policy: Policy, scan: RecordScan, now: datetime) -> Verdict:
    """Every stage judged, each with the base branch's tests and the baselines, at ``now``."""
    baselines, baseline_problem = _baselines(options.baseline)
    host = _host(options.host)
    bases, note = _base_results(options.base_raw)
    runs = read_run_log(options.raw_dir)
    names = _stage_names(scan, policy, bool(options.only))
    commit = run_commit({n: scan.records[n] for n in names if n in scan.records})
    stages = []
    for name in names:
        data = _collect(scan, name, options.raw_dir, runs.get(name))
        data = _with_base(data, bases.get(name), note)
        stages.append(
            judge_stage(
                name,
                data,
                policy,
                baselines,
                baseline_problem,
                host,
                ab_base=options.ab_base,
                commit=commit,
                now=now,
            )
        )
    return decide(stages)


def build_report(options: ReportOptions, env: Mapping[str, str]) -> tuple[Verdict, dict[str, str]]:
    """Read, collect, judge and render every output to text (nothing is written yet)."""
    policy: Policy = load_policy(options.pyproject).require(options.require).only(options.only)
    now = datetime.now(UTC)
    verdict = _judge(options, policy, _records(options, policy), now)
    generated_at = now.strftime("%Y-%m-%d %H:%M:%S UTC")
    judged = {s.name: s.data.record for s in verdict.stages if s.data.record is not None}
    commit = run_commit(judged) or "unknown"
    base, changed = changed_files(options.changed_files, options.base_ref, env)
    ctx = Context(
        generated_at,
        commit[:12],
        base,
        changed,
        str(options.raw_dir),
        _run_url(options, env),
        policy.gate_files_in(changed),
    )
    summary = render_summary(summary_view(verdict, ctx))
    files = {"summary.md": summary, "verdict.json": verdict_json(verdict, generated_at, commit)}
    if options.github:
        files["comment.md"] = comment_body(summary)
    for stage in verdict.stages:
        name = f"{stage.name}.md"
        if name in files:  # stage names are refused before this: never write one over another
            raise InternalError(f"stage {stage.name!r} would overwrite the report's {name}")
        files[name] = render_stage(stage_view(stage, ctx))
    return verdict, files


def _target(out_dir: Path, name: str) -> Path:
    """Where ``name`` is written: a plain file name directly under ``out_dir``, nowhere else."""
    # A link already there is replaced by the rename, never written through.
    if Path(name).name != name or name in ("", ".", "..") or "\\" in name:
        raise InternalError(f"refusing to write {name!r}: not a file name directly under {out_dir}")
    return out_dir / name


def _previous_outputs(out_dir: Path) -> set[str]:
    """The files an earlier report may have left in ``out_dir``: its summary, comment and
    verdict, and a report for each stage it (or any known stage) judged."""
    names = {"summary.md", "comment.md", "verdict.json"}
    try:
        old = json.loads((out_dir / "verdict.json").read_text(encoding="utf-8"))
        stages = [s.get("name") for s in old.get("stages", [])]
    except (OSError, ValueError, AttributeError, TypeError):
        return names
    return names | {f"{n}.md" for n in stages if stage_name_problem(n) is None}


def _remove(out_dir: Path, names: set[str]) -> None:
    for name in sorted(names):
        _target(out_dir, name).unlink(missing_ok=True)


def run_report(options: ReportOptions, env: Mapping[str, str]) -> Verdict:
    """Build the report, then write it. Input that cannot be judged removes the previous
    report's files first (its verdict must not be read as this run's) and writes nothing."""
    previous = _previous_outputs(options.out_dir)
    try:
        verdict, files = build_report(options, env)
    except Exception:
        _remove(options.out_dir, previous)
        raise
    targets = {_target(options.out_dir, name): text for name, text in files.items()}
    for target, text in targets.items():
        write_atomic(target, text)
    _remove(options.out_dir, previous - set(files))  # stages this run did not judge
    if options.github:
        append_step_summary(files["summary.md"], env)
        for line in annotations(verdict):
            print(line)
    return verdict
