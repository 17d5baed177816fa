"""Kill rate per file from ``mutmut results --all true``, with the listed equivalent mutants
left out; exits 1 when a file is under the limit, an equivalent entry is stale, or the run
is incomplete.

    python tools/mutation_report.py RESULTS... --equivalents tests/mutation_equivalents.toml \\
        [--min-kill 90] [--out reports/mutation/report.md] [--show-command "mutmut show"] \\
        [--workspace stagegate=stagegate] [--only GLOB]...

Several results files (one per directory mutmut ran in) make one report. ``--workspace`` names the
directory mutmut ran in for a package's mutants, where ``mutmut show`` must run too.
``--only`` judges just the mutants a run named (the globs given to ``mutmut run``).

Detected: ``killed`` and ``timeout`` (a mutant that makes the tests hang is caught by CI's
time limit). Not detected: ``survived``, ``no tests``, ``suspicious``. A run that left
mutants ``not checked`` or ``skipped`` is incomplete, which is an error, never a pass.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import shlex
import subprocess
import sys
import tomllib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

DETECTED = {"killed", "timeout"}
MISSED = {"survived", "no tests", "suspicious", "segfault"}
INCOMPLETE = {"not checked", "skipped", "check was interrupted by user"}
_LINE = re.compile(r"^\s*(?P<name>[\w.ǁ]+__mutmut_\d+): (?P<status>.+?)\s*$")


@dataclass(frozen=True)
class Equivalent:
    mutant: str
    line: str  # the mutated line, as `mutmut show` prints it after "+" ("-" and it: one deleted)
    why: str


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


def load_equivalents(path: Path) -> list[Equivalent]:
    data = tomllib.loads(path.read_text())
    out = []
    for i, entry in enumerate(data.get("equivalent", [])):
        missing = {"mutant", "line", "why"} - set(entry)
        if missing or not str(entry.get("why", "")).strip():
            raise ValueError(f"{path}: entry {i + 1} needs mutant, line and a why ({missing})")
        out.append(Equivalent(entry["mutant"], entry["line"].strip(), entry["why"].strip()))
    return out


def check_equivalents(
    equivalents: list[Equivalent],
    statuses: dict[str, str],
    show: list[str] | None,
    workspaces: dict[str, Path] | None = None,
) -> list[str]:
    """Problems with the list: an entry whose mutant is gone, detected, or now a different
    change (mutmut numbers mutants by position, so an edit can renumber them)."""
    problems = []
    for eq in equivalents:
        status = statuses.get(eq.mutant)
        if status is None:
            problems.append(f"{eq.mutant}: listed as equivalent but not in the results")
        elif status in DETECTED:
            problems.append(f"{eq.mutant}: listed as equivalent but it is {status}")
        elif show is not None:
            cwd = (workspaces or {}).get(eq.mutant.partition(".")[0])
            diff = subprocess.run(
                [*show, eq.mutant], capture_output=True, text=True, cwd=cwd
            ).stdout
            changed = changed_lines(diff)
            if eq.line not in changed:
                problems.append(f"{eq.mutant}: its change is now {changed}, not {eq.line!r}")
    return problems


def changed_lines(diff: str) -> list[str]:
    """What a mutant's diff (``mutmut show``) changes: its added lines, stripped; a mutant that
    only deletes (an argument left out) gives its removed lines, each marked with a "-"."""
    added = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+ ")]
    if added:
        return added
    return ["-" + ln[1:].strip() for ln in diff.splitlines() if ln.startswith("- ")]


def kill_rates(
    statuses: dict[str, str], equivalent: set[str]
) -> dict[str, tuple[int, int, Counter[str]]]:
    """File -> (detected, counted, statuses), equivalent mutants not counted."""
    by_file: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in statuses.items():
        by_file[source_file(name)]["equivalent" if name in equivalent else status] += 1
    rates = {}
    for path, counts in sorted(by_file.items()):
        detected = sum(counts[s] for s in DETECTED)
        counted = sum(n for s, n in counts.items() if s != "equivalent")
        rates[path] = (detected, counted, counts)
    return rates


def render(rates: dict[str, tuple[int, int, Counter[str]]], minimum: float) -> str:
    lines = [
        "# Mutation testing",
        "",
        f"Kill rate of non-equivalent mutants per file (limit {minimum:g}%).",
        "",
        "| file | kill rate | detected | counted | equivalent | survived | no tests | timeout |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path, (detected, counted, c) in rates.items():
        rate = 100 * detected / counted if counted else 100.0
        lines.append(
            f"| `{path}` | {rate:.1f}% | {detected} | {counted} | {c['equivalent']} "
            f"| {c['survived']} | {c['no tests']} | {c['timeout']} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--equivalents", type=Path, required=True)
    parser.add_argument("--min-kill", type=float, default=90.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--show-command", help='e.g. "mutmut show": checks each entry\'s change')
    parser.add_argument(
        "--workspace",
        action="append",
        default=[],
        metavar="PACKAGE=DIR",
        help="the directory mutmut ran in for PACKAGE's mutants (default: here)",
    )
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
    args = parser.parse_args(argv)
    args.workspaces = {}
    for item in args.workspace:
        package, sep, where = item.partition("=")
        if not sep:
            parser.error(f"--workspace takes PACKAGE=DIR, not {item!r}")
        args.workspaces[package] = Path(where)
    return args


def judge(
    statuses: dict[str, str], equivalents: list[Equivalent], args: argparse.Namespace
) -> tuple[str, list[str]]:
    """The report's text and the problems that fail the run."""
    show = shlex.split(args.show_command) if args.show_command else None
    problems = check_equivalents(equivalents, statuses, show, args.workspaces)
    unfinished = sorted(n for n, s in statuses.items() if s in INCOMPLETE)
    if unfinished:
        problems.append(f"{len(unfinished)} mutants were not tested (first: {unfinished[0]})")
    unknown = sorted({s for s in statuses.values()} - DETECTED - MISSED - INCOMPLETE)
    if unknown:
        problems.append(f"statuses this report does not know: {unknown}")
    listed = {e.mutant for e in equivalents}
    rates = kill_rates(statuses, listed)
    report = render(rates, args.min_kill)
    if args.only:
        report += f"\nOnly the mutants named by {', '.join(f'`{g}`' for g in args.only)}.\n"
    missed = sorted(n for n, s in statuses.items() if s in MISSED and n not in listed)
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
    equivalents = load_equivalents(args.equivalents)
    if args.only:
        equivalents = [e for e in equivalents if e.mutant in statuses]
    elif args.partial:
        files = {source_file(n) for n in statuses}
        equivalents = [e for e in equivalents if source_file(e.mutant) in files]
    report, problems = judge(statuses, equivalents, args)
    if problems:
        report += "\n## Problems\n\n" + "\n".join(f"- {p}" for p in problems) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    print(report)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
