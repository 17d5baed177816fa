"""``stagegate report``: read records, collect, judge, render, write: a pipeline of small steps."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from stagegate.collect import collect_stage, find_records, read_baselines
from stagegate.errors import InputError
from stagegate.github import COMMENT_MARKER, annotations, append_step_summary, comment_body
from stagegate.io import write_atomic
from stagegate.judge import decide, judge_stage
from stagegate.model import STAGES, StageData, StageRecord, Verdict
from stagegate.policy import Policy, load_policy
from stagegate.render import render_stage, render_summary, verdict_json
from stagegate.views import Context, stage_view, summary_view

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


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def changed_files(base_ref: str | None, env: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """Files changed between the base and HEAD, with what the base was, in words."""
    ref = base_ref or (f"origin/{env['GITHUB_BASE_REF']}" if env.get("GITHUB_BASE_REF") else None)
    if not ref:
        return "no base given (pass --base REF)", ()
    out = _git("diff", "--name-status", f"{ref}...HEAD")
    if out is None:
        return f"{ref} (not available in this clone)", ()
    return ref, tuple(" ".join(line.split("\t")) for line in out.splitlines() if line.strip())


def _run_url(options: ReportOptions, env: Mapping[str, str]) -> str:
    """The GitHub Actions run page (where the reports artifact is), in --github mode."""
    keys = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    if not options.github or not all(env.get(k) for k in keys):
        return ""
    server, repo, run = (env[k] for k in keys)
    return f"{server}/{repo}/actions/runs/{run}"


def _records(options: ReportOptions, policy: Policy) -> dict[str, StageRecord]:
    records = find_records(options.raw_dir)
    if not records:
        how = policy.rerun or "stagegate run STAGE -- COMMAND, for each stage"
        raise InputError(f"no stage records in {options.raw_dir}: run the stages first ({how})")
    return records


def _stage_names(records: Mapping[str, StageRecord], policy: Policy, only: bool) -> list[str]:
    """The stages to judge: the known ones the policy names or that ran, then any others."""
    wanted = [s for s in STAGES if s in records or s in policy.required or s in policy.skippable]
    return [
        *(s for s in wanted if s in policy.judged),
        *(s for s in records if s not in STAGES and not only),
    ]


def _collect(record: StageRecord | None, raw_dir: Path) -> StageData:
    return collect_stage(record, raw_dir) if record else StageData(record=None)


def build_report(options: ReportOptions, env: Mapping[str, str]) -> tuple[Verdict, dict[str, str]]:
    """Read, collect, judge and render every output to text (nothing is written yet)."""
    policy: Policy = load_policy(options.pyproject).require(options.require).only(options.only)
    records = _records(options, policy)
    baselines = read_baselines(options.baseline) if options.baseline else []
    verdict = decide(
        [
            judge_stage(name, _collect(records.get(name), options.raw_dir), policy, baselines)
            for name in _stage_names(records, policy, bool(options.only))
        ]
    )
    generated_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    commit = next((r.commit for r in records.values() if r.commit), None) or "unknown"
    base, changed = changed_files(options.base_ref, env)
    ctx = Context(
        generated_at, commit[:12], base, changed, str(options.raw_dir), _run_url(options, env)
    )
    summary = render_summary(summary_view(verdict, ctx))
    files = {"summary.md": summary, "verdict.json": verdict_json(verdict, generated_at, commit)}
    for stage in verdict.stages:
        files[f"{stage.name}.md"] = render_stage(stage_view(stage, policy, ctx))
    if options.github:
        files["comment.md"] = comment_body(summary)
    return verdict, files


def run_report(options: ReportOptions, env: Mapping[str, str]) -> Verdict:
    """Build the report, then write it; a failure before writing leaves the old outputs intact."""
    verdict, files = build_report(options, env)
    for name, text in files.items():
        write_atomic(options.out_dir / name, text)
    if options.github:
        append_step_summary(files["summary.md"], env)
        for line in annotations(verdict):
            print(line)
    return verdict
