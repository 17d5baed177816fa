"""The files a stage declared: not produced, gone since the stage ended, or refused.

A file a stage declares (``--junit``, ``--coverage``, ``--warnings``, ``--metrics``,
``--benchmark``, ``--lint``) is part of what it promised. Not producing it blocks a required
stage, naming what writes it; a file that the stage wrote and that is gone at report time is
said to be gone, not unwritten; and a file collection refused (outside the raw directory,
changed after the stage ended) is never read and always blocks.
"""

from __future__ import annotations

import shlex
from pathlib import PurePath

from stagegate.judge.findings import Findings
from stagegate.judge.policy import Policy
from stagegate.kinds import Kind
from stagegate.model import MissingFile, StageData, StageRecord

# Files a stage may leave unwritten without its results becoming unreadable (their tests may
# have failed): blocking in a required stage, a note in any other.
OPTIONAL_FILES = ("metrics", "warnings")
PRODUCERS = {
    "junit": "the test runner's JUnit report (pytest --junitxml)",
    "coverage": "coverage's JSON report (--cov-report=json:FILE)",
    "warnings": "stagegate's pytest plugin (pytest --stagegate-warnings=FILE)",
    "metrics": 'the stage\'s own code, writing {"curves": ...}',
    "benchmark": "the benchmark command's --out",
    "ab": "the A/B benchmark's --out (python -m amptrain.benchmark.ab)",
    "lint": "the linter",
}


def unreadable(data: StageData) -> tuple[str, ...]:
    """Why the stage's results cannot be judged: unreadable, refused or missing result files."""
    missing = tuple(m.message for m in data.missing_files if m.kind not in OPTIONAL_FILES)
    refused = tuple(f"{r.path} refused: {r.reason}" for r in data.refused_files)
    return data.input_errors + refused + missing


def _why_unwritten(data: StageData) -> str:
    suite = data.suite
    if suite is None:
        return "the stage left no test results either"
    if suite.count("failed") + suite.count("error") + suite.count("skipped"):
        return "likely because tests that write it failed or were skipped (see above)"
    return "though every test passed: check the code that writes it"


def _missing(f: Findings, data: StageData, missing: MissingFile, required: bool) -> None:
    name = PurePath(missing.path).name
    flag = f"--{missing.kind}"
    command = shlex.join(data.record.command) if data.record else "the stage's command"
    if missing.disappeared:
        f.add(
            Kind.OUTPUT_MISSING,
            f"{name} is gone: the stage wrote it, and it was removed before the report",
            detail=f"{missing.path} ({flag}) has a sha256 in the record; {missing.message}",
            fix="find what deletes files under the raw directory between the stage and the "
            "report (a test or a script cleaning it), then run the stage again",
        )
    elif missing.stale:
        blocks = required or missing.kind not in OPTIONAL_FILES
        f.add(
            Kind.OUTPUT_MISSING if blocks else Kind.SIDE_FILE_MISSING,
            f"{name} was not written by this run",
            detail=f"{missing.path} ({flag}): {missing.message}; it is not read",
            fix=f"make the stage's command write {missing.path} on every run (or remove the "
            "file before the stage), then run the stage again",
        )
    elif required or missing.kind not in OPTIONAL_FILES:
        f.add(
            Kind.OUTPUT_MISSING,
            f"{name} was not produced",
            detail=f"{missing.path} is declared with {flag}; it is written by "
            f"{PRODUCERS.get(missing.kind, 'the stage command')}, run by {command}; "
            + _why_unwritten(data),
            fix=f"make the stage write {missing.path}, or stop declaring it",
        )
    else:
        f.add(
            Kind.SIDE_FILE_MISSING,
            f"{name} was not written",
            detail=_why_unwritten(data),
            fix="its charts and figures are left out of this report",
        )


def _declares(record: StageRecord, kind: str) -> bool:
    """Whether ``record`` names a file of ``kind`` ("lint": any linter's, "lint:TOOL": that
    tool's)."""
    return any(kind in (k, label) for k, _, label in record.named_files())


def _undeclared(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    record = data.record
    if record is None:
        return
    for kind in policy.outputs.get(stage, ()):
        if _declares(record, kind):
            continue
        flag = (
            "--lint=" + (kind.partition(":")[2] or "TOOL") + "=FILE"
            if kind.startswith("lint")
            else f"--{kind}=FILE"
        )
        f.add(
            Kind.OUTPUT_MISSING,
            f"{stage} produced no {kind} file: the policy requires one",
            detail=f"the record declares {', '.join(sorted(record.files)) or 'no file'}; "
            f"[tool.stagegate.stages.{stage}] outputs: {', '.join(policy.outputs[stage])}. "
            "What it would hold goes unchecked without it",
            fix=f"run the stage as stagegate run {stage} {flag} -- COMMAND; the file is "
            f"written by {PRODUCERS.get(kind.partition(':')[0], 'the stage command')}",
        )


def output_findings(f: Findings, data: StageData, stage: str, policy: Policy) -> None:
    """A finding for every file the policy requires the stage did not declare, and every
    declared file that is missing, gone or refused."""
    _undeclared(f, data, stage, policy)
    for missing in data.missing_files:
        _missing(f, data, missing, stage in policy.required)
    for refused in data.refused_files:
        f.add(
            Kind.OUTPUT_REFUSED,
            f"{PurePath(refused.path).name} refused: {refused.reason}",
            detail=f"{refused.path} ({refused.kind}) was not read",
            fix="run the stage again; a record names only files under its --out-dir, and "
            "nothing may write them after the stage ends",
        )
