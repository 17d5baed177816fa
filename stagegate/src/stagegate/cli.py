"""The ``stagegate`` command line: ``run`` and ``report``; errors caught in one place."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import traceback
from pathlib import Path

from stagegate.collect import LINT_TOOLS
from stagegate.errors import InternalError, StagegateError, UsageError
from stagegate.model import Decision
from stagegate.record.runner import run_stage
from stagegate.report import ReportOptions, run_report

EXIT_PASS, EXIT_BLOCK = 0, 1


def _run_options(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        usage="stagegate run STAGE [options] -- COMMAND...",
        help="run a stage's command and record what happened",
        description="Run COMMAND, stream its output, and always write "
        "OUT_DIR/STAGE.json; exit with the command's code.",
    )
    run.add_argument("stage")
    run.add_argument("--junit", metavar="F", help="JUnit XML the command writes")
    run.add_argument("--coverage", metavar="F", help="coverage JSON the command writes")
    run.add_argument("--warnings", metavar="F", help="warnings JSON (pytest --stagegate-warnings)")
    run.add_argument("--benchmark", metavar="F", help="amptrain benchmark JSON")
    run.add_argument("--metrics", metavar="F", help='JSON {"curves": {...}} to chart')
    run.add_argument("--ab", metavar="F", help="amptrain A/B benchmark JSON (base vs head)")
    run.add_argument(
        "--lint",
        metavar="TOOL=F",
        action="append",
        default=[],
        help=f"linter JSON output; TOOL is one of {', '.join(LINT_TOOLS)}",
    )
    run.add_argument("--timeout", metavar="S", type=float, help="stop the command after S seconds")
    run.add_argument("--out-dir", type=Path, default=Path("reports/raw"))


def _report_options(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rep = sub.add_parser(
        "report",
        help="judge the records and render the reports",
        description="Exit 0 for PASS, 1 for BLOCK, 2 for input that cannot be used.",
    )
    for option in dataclasses.fields(ReportOptions):  # each option is declared there, once
        settings = option.metadata["argparse"]
        if option.metadata["positional"]:
            rep.add_argument(option.name, help=option.metadata["help"], **settings)
            continue
        default = list(option.default) if isinstance(option.default, tuple) else option.default
        flag = option.metadata["flag"] or "--" + option.name.replace("_", "-")
        rep.add_argument(
            flag, dest=option.name, default=default, help=option.metadata["help"], **settings
        )


def _report(args: argparse.Namespace) -> ReportOptions:
    """The options ``args`` gives, as :class:`ReportOptions` (lists become tuples)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(ReportOptions)}
    return ReportOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stagegate",
        description="Record each verification stage, judge the records by the written policy, "
        "and render markdown reports.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _run_options(sub)
    _report_options(sub)
    return parser


def _files(args: argparse.Namespace) -> dict[str, object]:
    files: dict[str, object] = {
        k: getattr(args, k)
        for k in ("junit", "coverage", "warnings", "benchmark", "metrics", "ab")
        if getattr(args, k)
    }
    lint = {}
    for item in args.lint:
        tool, sep, path = item.partition("=")
        if not sep or not path:
            raise UsageError(f"--lint {item!r}: write TOOL=FILE")
        if tool not in LINT_TOOLS:
            raise UsageError(f"--lint {tool}: unknown tool; known: {', '.join(LINT_TOOLS)}")
        lint[tool] = path
    if lint:
        files["lint"] = lint
    return files


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if argv[:1] == ["run"] and "--" in argv:  # everything after "--" is the stage's command
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            if not command:
                raise UsageError("no command given: stagegate run STAGE [options] -- COMMAND...")
            _, code = run_stage(
                args.stage,
                command,
                out_dir=args.out_dir,
                files=_files(args),
                timeout_s=args.timeout,
            )
            return code
        options = _report(args)
        verdict = run_report(options, os.environ)
        print(
            f"stagegate: {verdict.decision.value} (score {verdict.score}/100); "
            f"reports in {options.out_dir}/summary.md",
            file=sys.stderr,
        )
        return EXIT_PASS if verdict.decision is Decision.PASS else EXIT_BLOCK
    except StagegateError as exc:
        print(f"stagegate: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception:  # a bug in stagegate: never confused with BLOCK (1)
        traceback.print_exc()
        print(
            f"stagegate: internal error (exit {InternalError.exit_code}, no verdict): "
            "report it with the traceback above",
            file=sys.stderr,
        )
        return InternalError.exit_code


if __name__ == "__main__":
    sys.exit(main())
