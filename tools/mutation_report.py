"""Kill rate per file from ``mutmut results --all true``, and the mutants no test detected,
for people to read: a survivor is a behaviour no test pins, or a change no test can see. Exits
1 when the run is incomplete, or a file is under ``--min-kill`` where one is given.

    python tools/mutation_report.py RESULTS... [--min-kill N] [--out reports/mutation/report.md]
        [--partial] [--only GLOB]...

Several results files (one per directory mutmut ran in) make one report. ``--only`` judges
just the mutants a run named (the globs given to ``mutmut run``).

Detected: ``killed`` and ``timeout`` (a mutant that makes the tests hang is caught by CI's
time limit). Not detected: ``survived``, ``no tests``, ``suspicious``. A run that left
mutants ``not checked`` or ``skipped`` is incomplete, which is an error, never a pass.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

DETECTED = {"killed", "timeout"}
MISSED = {"survived", "no tests", "suspicious", "segfault"}
INCOMPLETE = {"not checked", "skipped", "check was interrupted by user"}
_LINE = re.compile(r"^\s*(?P<name>[\w.ǁ]+__mutmut_\d+): (?P<status>.+?)\s*$")


def parse_results(text: str) -> dict[str, str]:
    """Mutant name -> status, from ``mutmut results --all true``."""
    found = {}
    for raw in text.splitlines():
        if m := _LINE.match(raw):
            found[m["name"]] = m["status"]
    return found


# Where a package's sources live in the repository, when not under src/.
SOURCE_ROOTS = {"stagegate": "stagegate/src/"}


def source_file(mutant: str) -> str:
    """``amptrain.engine.xǁTrainStepǁrun__mutmut_3`` -> ``src/amptrain/engine.py``."""
    module = mutant.rsplit(".", 1)[0]
    root = SOURCE_ROOTS.get(module.partition(".")[0], "src/")
    return root + module.replace(".", "/") + ".py"


def only_files_that_ran(statuses: dict[str, str]) -> dict[str, str]:
    """The mutants of the files in which at least one mutant was tested."""
    ran = {source_file(n) for n, s in statuses.items() if s not in INCOMPLETE}
    return {n: s for n, s in statuses.items() if source_file(n) in ran}


def named_by(statuses: dict[str, str], globs: list[str]) -> dict[str, str]:
    """The mutants that ``mutmut run GLOB...`` runs: names matched with fnmatch, as it does."""
    return {n: s for n, s in statuses.items() if any(fnmatch.fnmatch(n, g) for g in globs)}


def kill_rates(statuses: dict[str, str]) -> dict[str, tuple[int, int, Counter[str]]]:
    """File -> (detected, counted, statuses)."""
    by_file: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in statuses.items():
        by_file[source_file(name)][status] += 1
    rates = {}
    for path, counts in sorted(by_file.items()):
        detected = sum(counts[s] for s in DETECTED)
        rates[path] = (detected, sum(counts.values()), counts)
    return rates


def render(rates: dict[str, tuple[int, int, Counter[str]]], minimum: float) -> str:
    limit = f" (limit {minimum:g}%)" if minimum else ""
    lines = [
        "# Mutation testing",
        "",
        f"Kill rate per file{limit}. Each survivor below is a change no test detected.",
        "",
        "| file | kill rate | detected | counted | survived | no tests | timeout |",
        "|---|---|---|---|---|---|---|",
    ]
    for path, (detected, counted, c) in rates.items():
        rate = 100 * detected / counted if counted else 100.0
        lines.append(
            f"| `{path}` | {rate:.1f}% | {detected} | {counted} "
            f"| {c['survived']} | {c['no tests']} | {c['timeout']} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--min-kill", type=float, default=0.0, help="fail a file under it")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--partial", action="store_true", help="leave out the files none of whose mutants ran"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="judge only the mutants these names or globs match, as mutmut run matches them",
    )
    return parser.parse_args(argv)


def judge(statuses: dict[str, str], args: argparse.Namespace) -> tuple[str, list[str]]:
    """The report's text and the problems that fail the run."""
    problems = []
    unfinished = sorted(n for n, s in statuses.items() if s in INCOMPLETE)
    if unfinished:
        problems.append(f"{len(unfinished)} mutants were not tested (first: {unfinished[0]})")
    unknown = sorted({s for s in statuses.values()} - DETECTED - MISSED - INCOMPLETE)
    if unknown:
        problems.append(f"statuses this report does not know: {unknown}")
    rates = kill_rates(statuses)
    report = render(rates, args.min_kill)
    if args.only:
        report += f"\nOnly the mutants named by {', '.join(f'`{g}`' for g in args.only)}.\n"
    missed = sorted(n for n, s in statuses.items() if s in MISSED)
    if missed:
        report += "\n## Not detected\n\nSee each with `mutmut show NAME`.\n\n"
        report += "\n".join(f"- `{n}`: {statuses[n]}" for n in missed) + "\n"
    timed_out = sorted(n for n, s in statuses.items() if s == "timeout")
    if timed_out:
        report += (
            "\n## Timed out (counted as detected)\n\nEach should be a change that never ends "
            "(a loop's exit broken): see it with `mutmut show NAME`.\n\n"
        )
        report += "\n".join(f"- `{n}`" for n in timed_out) + "\n"
    for path, (detected, counted, _) in rates.items():
        if counted and 100 * detected / counted < args.min_kill:
            problems.append(
                f"{path}: kill rate {100 * detected / counted:.1f}% < {args.min_kill:g}%"
            )
    return report, problems


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    statuses = {}
    for results in args.results:
        statuses.update(parse_results(results.read_text()))
    if args.partial:
        statuses = only_files_that_ran(statuses)
    if args.only:
        statuses = named_by(statuses, args.only)
    if not statuses:
        names = ", ".join(map(str, args.results))
        chosen = f" matching {', '.join(args.only)}" if args.only else ""
        print(f"{names}: no mutant results{chosen} in them: did mutmut run?", file=sys.stderr)
        return 1
    report, problems = judge(statuses, args)
    if problems:
        report += "\n## Problems\n\n" + "\n".join(f"- {p}" for p in problems) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    print(report)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
