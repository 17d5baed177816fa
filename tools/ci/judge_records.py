"""The trusted judge: lay a stage artifact out (raw_layout.py), judge it with the default
branch's stagegate and policy, and give the status the required check is to report.

    STAGEGATE="$GATE/bin/stagegate" python tools/ci/judge_records.py \
        --artifact DIR --work DIR --base . --out reports --changed-files FILE \
        --stage static --stage execution ... [--commit SHA] [--note TEXT] [--problem TEXT] \
        [--codeowners] [--settings] [--host host.json --image REF] [--base-artifact DIR] \
        -- --require static ...        # anything after -- goes to stagegate report

runs ``stagegate report reports/raw`` inside WORK (where the records' ``reports/raw/...``
paths resolve inside RAW and nowhere else) with ``--pyproject BASE/pyproject.toml`` and
``--changed-files FILE``, checks its exit code against the verdict.json it wrote, and writes
``state=`` and ``description=`` to $GITHUB_OUTPUT. It exits 0 whenever it reached a verdict,
BLOCK included; the status job reports it. ``--base-artifact`` is the default branch's last
trusted verify artifact (tools/ci/trusted_runs.py): laid out as the records are, it is given to
stagegate as ``--base-raw`` so newly skipped tests are named; one that is absent or refused is
compared with nothing, and the summary says so; with ``--base-attested-by judge.yml`` every
record in it must be attested by that workflow run from refs/heads/main. ``--settings`` reads
the default branch's active rules first (GATE_APP_ID names the gate App): a missing App pin,
review rule or up-to-date rule fails the check, since the gate could then be bypassed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import urllib.error
from pathlib import Path

from github_api import Api, RestApi, shown, write_outputs
from raw_layout import LayoutError, _record, lay_out
from repo_settings import branch_problems
from trusted_artifacts import ArtifactError, attested, host_facts, require_provenance
from verdict_status import Status, from_stagegate


def codeowners_problem(api: Api, repo: str, branch: str) -> str | None:
    """Why the default branch's CODEOWNERS cannot require the gate's reviews, or None."""
    try:
        errors = api.get(f"/repos/{repo}/codeowners/errors", ref=branch)["errors"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return f"no CODEOWNERS on {branch}: gate changes would need no maintainer review"
        raise
    if errors:
        first = errors[0]
        return f"CODEOWNERS on {branch} line {first.get('line')}: {first.get('kind')}"
    return None


def settings_problem(api: Api, repo: str, branch: str, app_id: str) -> str | None:
    """Why the default branch's rules let a change in without the gate App's checks, or None."""
    if not app_id.isdigit():
        return "GATE_APP_ID is not set: the checks cannot be pinned to the gate App"
    problems = branch_problems(api.get(f"/repos/{repo}/rules/branches/{branch}"), int(app_id))
    return f"{branch}'s rules: {'; '.join(problems)}" if problems else None


def base_attested(args: argparse.Namespace) -> None:
    """With --base-attested-by, refuse base records that the workflow on main did not attest."""
    if not args.base_attested_by:
        return
    records = sorted(p for p in args.base_artifact.glob("*.json") if _record(p) is not None)
    digests = ["sha256:" + hashlib.sha256(p.read_bytes()).hexdigest() for p in records]
    repo = os.environ["GITHUB_REPOSITORY"]
    require_provenance(attested(repo), args.base_attested_by, digests or ["(no record)"])


def base_raw(args: argparse.Namespace, work: Path) -> list[str]:
    """``--base-raw DIR`` for the default branch's artifact laid out in WORK, or nothing."""
    if args.base_artifact is None:
        return []
    raw = work / "base" / "reports" / "raw"
    try:
        base_attested(args)
        lay_out(args.base_artifact, raw, args.stages)
    except (LayoutError, ArtifactError) as exc:
        print(f"judge: the base branch's records are not compared: {shown(exc)}")
        return []
    return ["--base-raw", str(raw.resolve())]


def run_stagegate(command: list[str], work: Path, args: argparse.Namespace) -> Status:
    """``stagegate report`` in WORK with the base policy and the change's files; its exit code
    counts only with the verdict.json it wrote (a command that failed to start is no BLOCK)."""
    verdict = args.out / "verdict.json"
    verdict.unlink(missing_ok=True)
    argv = [
        *command, "report", "reports/raw", "--out", str(args.out.resolve()),
        "--pyproject", str((args.base / "pyproject.toml").resolve()),
        "--changed-files", str(args.changed_files.resolve()), *base_raw(args, work),
        *(["--host", str(args.host.resolve())] if args.host else []),
        *args.stagegate_args,
    ]  # fmt: skip
    print("judge:", shlex.join(argv), flush=True)
    code = subprocess.run(argv, cwd=work, check=False).returncode
    status = from_stagegate(code)
    if status.state == "error":
        return status
    try:
        decision = json.loads(verdict.read_text(encoding="utf-8"))["decision"]
    except (OSError, ValueError, KeyError, TypeError):
        return Status("error", f"stagegate exited {code} and wrote no verdict.json")
    if (decision == "PASS") != (code == 0):
        return Status("error", f"stagegate exited {code} but its verdict.json says {decision!r}")
    return status


def judge(args: argparse.Namespace, command: list[str], problem: str | None) -> Status:
    """The verdict on the artifact, or why there is none."""
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.host:
            host_facts(args.host, args.commit, args.image)
        stages = lay_out(args.artifact, work / "reports" / "raw", args.stages, commit=args.commit)
    except (LayoutError, ArtifactError) as exc:
        return Status("error", f"records refused: {exc}")
    print(f"judge: records of {', '.join(stages)} laid out in {work / 'reports' / 'raw'}")
    status = run_stagegate(command, work, args)
    if problem and status.state != "error":
        status = Status("failure", problem)
    if args.note:
        status = Status(status.state, f"{status.description}; {args.note}")
    return status


def known_problem(args: argparse.Namespace) -> str | None:
    """What --codeowners and --settings find wrong with the default branch, or None."""
    env = os.environ
    if not (args.codeowners or args.settings):
        return None
    api, repo, branch = RestApi(), env["GITHUB_REPOSITORY"], env.get("DEFAULT_BRANCH", "main")
    problem = codeowners_problem(api, repo, branch) if args.codeowners else None
    if problem is None and args.settings:
        problem = settings_problem(api, repo, branch, env.get("GATE_APP_ID", ""))
    return problem


def _summary(text: str) -> None:
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(f"> [!WARNING]\n> {text}\n\n")


def main(argv: list[str] | None = None) -> int:
    """Judge, and write state= and description= for the status job."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--artifact", "--work", "--base", "--out", "--changed-files"):
        parser.add_argument(name, type=Path, required=True)
    parser.add_argument("--stage", action="append", required=True, dest="stages")
    parser.add_argument("--commit", help="the commit every record must name")
    parser.add_argument("--note", default="", help="added to the status, e.g. NOT VERIFIED")
    parser.add_argument("--codeowners", action="store_true", help="check CODEOWNERS first")
    parser.add_argument("--settings", action="store_true", help="check the branch's rules first")
    parser.add_argument("--problem", default="", help="a known reason to fail the check")
    parser.add_argument("--host", type=Path, help="host.json of a GPU job, checked first")
    parser.add_argument("--image", help="the image the GPU job was given (with --host)")
    parser.add_argument("--base-artifact", type=Path, help="the default branch's last records")
    parser.add_argument("--base-attested-by", help="the workflow whose attestation they need")
    args = parser.parse_args(argv)
    if args.host and not (args.commit and args.image):
        parser.error("--host needs --commit and --image")
    args.stagegate_args = extra
    problem = args.problem or known_problem(args)
    command = shlex.split(os.environ.get("STAGEGATE", "stagegate"))
    status = judge(args, command, problem)
    for line in (problem, args.note):
        if line:
            _summary(line)
    print(f"judge: {status.state}: {shown(status.description)}")
    write_outputs({"state": status.state, "description": status.description})
    return 0


if __name__ == "__main__":
    sys.exit(main())
