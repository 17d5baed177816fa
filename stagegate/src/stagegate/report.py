"""``stagegate report`` as a pipeline: read the records, collect every input once into typed
values (:class:`Inputs`), judge every stage, build the views, render them, write the files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stagegate.collect import collect_stage, find_records, read_baselines, read_host, read_run_log
from stagegate.collect.changes import changed_files
from stagegate.collect.records import RecordScan
from stagegate.errors import InputError, InternalError, UsageError
from stagegate.io import write_atomic
from stagegate.judge import decide, judge_stage
from stagegate.judge.commits import run_changes, run_commit
from stagegate.judge.policy import Policy, load_policy
from stagegate.judge.required import canonical
from stagegate.model import (
    UNATTRIBUTED,
    Benchmark,
    StageData,
    TestSuite,
    Verdict,
    stage_name_problem,
)
from stagegate.view.github import COMMENT_MARKER, annotations, append_step_summary, comment_body
from stagegate.view.parts import Context
from stagegate.view.render import render_stage, render_summary, verdict_json
from stagegate.view.stage import stage_view
from stagegate.view.summary import summary_view

__all__ = ["COMMENT_MARKER", "Inputs", "ReportOptions", "build_report", "run_report"]


def option(
    help: str, *, flag: str = "", default: Any = None, positional: bool = False, **argparse: Any
) -> Any:
    """A report option, declared once: its field here, its command-line flag (``--name-dashed``
    from the field's name unless ``flag``; ``positional``: a required argument) and its help."""
    meta = {"flag": flag, "help": help, "positional": positional, "argparse": argparse}
    return field(metadata=meta) if positional else field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """What ``stagegate report`` is asked; the command line is built from these fields."""

    raw_dir: Path = option("the folder the stages' records are in", type=Path, positional=True)
    out_dir: Path = option(
        "where the reports are written", flag="--out", default=Path("reports"), type=Path
    )
    require: tuple[str, ...] = option(
        "make STAGE mandatory (no skipping), e.g. performance on the PR gate",
        default=(), action="append", metavar="STAGE",
    )  # fmt: skip
    only: tuple[str, ...] = option(
        "judge only STAGE (repeatable); other stages are judged by another job",
        default=(), action="append", metavar="STAGE",
    )  # fmt: skip
    baseline: Path | None = option("baseline benchmark JSON, or a directory of them", type=Path)
    github: bool = option(
        "job summary, PR comment body (comment.md) and ::error annotations",
        default=False, action="store_true",
    )  # fmt: skip
    pyproject: Path | None = option(
        "where [tool.stagegate] is read from (default: ./pyproject.toml, the defaults where "
        "there is none)",
        type=Path,
    )
    base_ref: str | None = option(
        "git ref to list changed files against, edits not committed included (default: the "
        "PR base)",
        flag="--base",
    )
    changed_files: Path | None = option(
        "the paths the change touches, one a line (used instead of a git diff)",
        type=Path, metavar="FILE",
    )  # fmt: skip
    base_raw: Path | None = option(
        "the base branch's raw results: tests it ran that are skipped or gone here",
        type=Path, metavar="DIR",
    )  # fmt: skip
    host: Path | None = option(
        "the GPU job's host.json: the benchmark must name the GPU the host has",
        type=Path, metavar="FILE",
    )  # fmt: skip
    gate_witness: bool = option(
        "hold pytest's JUnit files against the gate's own witness only (JUNIT.witness.json, "
        "as tools/ci/cpu_stage.py runs it); none beside one: its outcomes are unwitnessed",
        default=False, action="store_true",
    )  # fmt: skip
    ab_base: str | None = option(
        "the base commit an A/B file must have measured (the PR's merge base); "
        "without it, an A/B of a commit against itself blocks",
        metavar="SHA",
    )  # fmt: skip


@dataclass(frozen=True)
class Inputs:
    """Everything the judge and the views use, read once: the policy, the stages to judge
    (collected, each with the base branch's tests), the baselines, the host, the change."""

    policy: Policy
    stages: dict[str, StageData]
    commit: str | None  # the commit the judged records name (None: none; "": they disagree)
    changes: dict[str, str] | None  # ... and the changes to its files they saw (None: unsaid)
    baselines: list[Benchmark]
    baseline_problem: str
    host: dict[str, Any] | None
    base: str  # what the changed files are measured against, in words
    changed: tuple[str, ...]
    now: datetime


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


def _collect(scan: RecordScan, name: str, raw_dir: Path, ran: str | None, gate: bool) -> StageData:
    record = scan.records.get(name)
    if record is None:
        problem = scan.problems.get(name, "")
        return StageData(record=None, record_gone=ran or "", record_problem=problem)
    return collect_stage(record, raw_dir, gate)


def _baselines(path: Path | None) -> tuple[list[Benchmark], str]:
    """The baselines given, or why they cannot be used (the comparison is then NOT VERIFIED)."""
    if path is None:
        return [], ""
    try:
        return read_baselines(path), ""
    except InputError as exc:
        return [], f"the baseline given cannot be used: {exc}"


def _base_results(base_raw: Path | None) -> tuple[dict[str, StageData], str]:
    """The base branch's collected stages (``--base-raw``), or why there are none."""
    if base_raw is None:
        return {}, "not compared: no base branch results given (--base-raw)"
    try:
        records = find_records(base_raw).records
    except InputError as exc:
        return {}, f"not compared: the base branch's results cannot be read: {exc}"
    return {name: collect_stage(rec, base_raw) for name, rec in records.items()}, ""


def _with_base(
    data: StageData, base: StageData | None, note: str, changed: tuple[str, ...] | None
) -> StageData:
    """``data`` with the base branch's tests and coverage, and the files the change touches."""
    coverage = base.coverage if base is not None else None
    data = replace(data, base_coverage=coverage, changed=changed)
    if base is not None and base.suite is not None:
        return replace(data, base_suite=base.suite)
    return replace(data, base_note=note or "not compared: the base branch left no test results")


def _names(suite: TestSuite | None, executed: bool = False) -> frozenset[str]:
    cases = suite.cases if suite is not None else ()
    return frozenset(canonical(c) for c in cases if c.executed or not executed)


def _ran_elsewhere(
    stages: dict[str, StageData], subsets: frozenset[str] = frozenset()
) -> dict[str, StageData]:
    """Each stage with the tests the other stages hold (a test one stage drops must run in
    another), ran there and ran there on the base branch (a test moved between stages is
    judged where it went); a ``subsets`` stage re-runs others' tests and excuses none."""
    ran = {name: _names(data.suite) for name, data in stages.items()}
    executed = {n: _names(d.suite, executed=True) for n, d in stages.items() if n not in subsets}
    base_ran = {
        n: _names(d.base_suite, executed=True) for n, d in stages.items() if n not in subsets
    }
    recorded = frozenset(
        name
        for name, d in stages.items()
        if d.record is not None or d.record_gone or d.record_problem
    )
    return {
        name: replace(
            data,
            ran_elsewhere=frozenset().union(*(v for k, v in ran.items() if k != name)),
            executed_elsewhere=frozenset().union(*(v for k, v in executed.items() if k != name)),
            recorded=recorded,
            base_ran_elsewhere=frozenset().union(*(v for k, v in base_ran.items() if k != name)),
        )
        for name, data in stages.items()
    }


def _policy(options: ReportOptions) -> Policy:
    """The policy, with the stages ``--require`` adds and ``--only`` keeps; a required stage
    that ``--only`` leaves out would never be judged: that is a usage error, not a PASS."""
    dropped = [s for s in options.require if options.only and s not in options.only]
    if dropped:
        raise UsageError(
            f"--require {' '.join(dropped)}: not among the stages --only judges "
            f"({', '.join(options.only)}); add --only {dropped[0]} or leave out --require"
        )
    return load_policy(_pyproject(options.pyproject)).require(options.require).only(options.only)


def _pyproject(given: Path | None) -> Path:
    """The policy's file: the one given, which must be there (a typo must not judge by the
    defaults), else ./pyproject.toml where there is one."""
    if given is None:
        return Path("pyproject.toml")  # load_policy: the defaults where there is none
    if not given.is_file():
        raise UsageError(
            f"--pyproject {given}: no such file; name the pyproject.toml that holds "
            "[tool.stagegate], or leave the option out to read ./pyproject.toml"
        )
    return given


def collect_inputs(options: ReportOptions, env: Mapping[str, str]) -> Inputs:
    """Every input of the report, read and collected once."""
    policy = _policy(options)
    scan = _records(options, policy)
    names = _stage_names(scan, policy, bool(options.only))
    runs = read_run_log(options.raw_dir)
    bases, note = _base_results(options.base_raw)
    base, changed = changed_files(options.changed_files, options.base_ref, env)
    stages = _ran_elsewhere(
        {
            n: _with_base(
                _collect(scan, n, options.raw_dir, runs.get(n), options.gate_witness),
                bases.get(n),
                note,
                changed,
            )
            for n in names
        },
        frozenset(n for n, spec in policy.stages.items() if spec.subset),
    )
    baselines, baseline_problem = _baselines(options.baseline)
    host = read_host(options.host) if options.host is not None else None
    records = {n: scan.records[n] for n in names if n in scan.records}
    commit = run_commit(records)
    changes = run_changes(records, commit)
    now = datetime.now(UTC)
    return Inputs(
        policy,
        stages,
        commit,
        changes,
        baselines,
        baseline_problem,
        host,
        base,
        changed or (),
        now,
    )


def judge_all(inputs: Inputs, ab_base: str | None = None) -> Verdict:
    """Every stage judged against the policy, the baselines and the host, at one moment."""
    judged = [
        judge_stage(
            name,
            data,
            inputs.policy,
            inputs.baselines,
            inputs.baseline_problem,
            inputs.host,
            ab_base=ab_base,
            commit=inputs.commit,
            now=inputs.now,
            changes=inputs.changes,
        )
        for name, data in inputs.stages.items()
    ]
    return decide(judged)


def _run_url(options: ReportOptions, env: Mapping[str, str]) -> str:
    """The GitHub Actions run page (where the reports artifact is), in --github mode."""
    keys = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    if not options.github or not all(env.get(k) for k in keys):
        return ""
    server, repo, run = (env[k] for k in keys)
    return f"{server}/{repo}/actions/runs/{run}"


def render_all(
    verdict: Verdict, inputs: Inputs, options: ReportOptions, env: Mapping[str, str]
) -> dict[str, str]:
    """The views of the judged verdict, rendered to text by file name (nothing written yet)."""
    generated_at = inputs.now.strftime("%Y-%m-%d %H:%M:%S UTC")
    commit = inputs.commit or "unknown"  # the run's commit, found once when collecting
    ctx = Context(
        generated_at,
        commit[:12],
        inputs.base,
        inputs.changed,
        str(options.raw_dir),
        _run_url(options, env),
        inputs.policy.gate_files_in(inputs.changed),
    )
    summary = render_summary(summary_view(verdict, ctx))
    files = {"summary.md": summary, "verdict.json": verdict_json(verdict, generated_at, commit)}
    if options.github:
        in_comment = replace(ctx, reports_beside=False)  # no STAGE.md beside a comment
        files["comment.md"] = comment_body(render_summary(summary_view(verdict, in_comment)))
    for stage in verdict.stages:
        name = f"{stage.name}.md"
        if name in files:  # stage names are refused before this: never write one over another
            raise InternalError(f"stage {stage.name!r} would overwrite the report's {name}")
        files[name] = render_stage(stage_view(stage, ctx))
    return files


def build_report(options: ReportOptions, env: Mapping[str, str]) -> tuple[Verdict, dict[str, str]]:
    """Collect, judge and render every output to text (nothing is written yet)."""
    inputs = collect_inputs(options, env)
    verdict = judge_all(inputs, options.ab_base)
    return verdict, render_all(verdict, inputs, options, env)


def _target(out_dir: Path, name: str) -> Path:
    """Where ``name`` is written: a plain file name directly under ``out_dir``, nowhere else."""
    # A link already there is replaced by the rename, never written through.
    if Path(name).name != name or name in ("", ".", "..") or "\\" in name:
        raise InternalError(f"refusing to write {name!r}: not a file name directly under {out_dir}")
    return out_dir / name


def _previous_outputs(out_dir: Path) -> set[str]:
    """The files an earlier report may have left in ``out_dir``: its summary, comment and
    verdict, and a report for each stage it (or any known stage) judged."""
    from stagegate.io import read_regular

    names = {"summary.md", "comment.md", "verdict.json"}
    limit = 16 * 2**20  # a verdict of thousands of findings is a few MB
    try:  # only a regular file of a report's size: a FIFO or a link to /dev/zero is not read
        old = json.loads(read_regular(out_dir / "verdict.json", limit) or "")
        stages = [s.get("name") for s in old.get("stages", [])]
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
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
